/* devbuf-info: list what devbuf can see (plugins, device identifiers,
 * devices, dtype namespaces) and say why something is missing; explain a
 * format string. Uses only the public API of libdevbuf. docs/devbuf-info.md
 * is the manual. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "info.h"

static const char usage_text[] =
    "Usage: devbuf-info [OPTION]...\n"
    "       devbuf-info [--mode MODE] [--json] format STRING\n"
    "List the devbuf plugins, device identifiers, devices and dtype namespaces\n"
    "this process can see, and why a plugin is missing or has no device.\n"
    "\n"
    "  -l, --list            short form: one line per plugin and per device\n"
    "  -v, --verbose         every path tried, full paths, every reason and detail\n"
    "      --json            machine-readable output, schema \"devbuf-info/1\"\n"
    "      --plugin PATH     also load the plugin file PATH (repeatable)\n"
    "      --plugin-from LABEL=PATH\n"
    "                        the same, recording LABEL as where it came from\n"
    "                        (the Python launcher passes \"entry point <package>\n"
    "                        <version>\" for each installed plugin package)\n"
    "      --isolate         probe each plugin's devices in a child process of its\n"
    "                        own, all at once, so a driver that crashes or hangs is\n"
    "                        reported, not fatal (the default)\n"
    "      --in-process      probe in this process, one plugin after another, with\n"
    "                        no time limit (to debug a driver)\n"
    "      --timeout SECS    how long the isolated probes may take (default 5)\n"
    "      --no-probe        list plugins and identifiers without starting any\n"
    "                        driver (no devices; fast)\n"
    "      --color WHEN      auto (default: only on a terminal, unless NO_COLOR is\n"
    "                        set), always or never\n"
    "      --mode MODE       format: default, struct (CPython struct rules) or numpy\n"
    "  -h, --help            this help, then exit\n"
    "  -V, --version         versions of the tool, the runtime and the plugin ABI\n"
    "\n"
    "Commands:\n"
    "  format STRING         explain a buffer format string: items, offsets, sizes,\n"
    "                        alignment, custom dtypes and the alternative chosen,\n"
    "                        or the error with a caret under the offending byte\n"
    "\n"
    "Environment: DEVBUF_PLUGINS (plugin files), DEVBUF_PLUGIN_PATH (directories),\n"
    "DEVBUF_NO_DEFAULT_PLUGINS=1 (skip the default directory), NO_COLOR, COLUMNS.\n"
    "\n"
    "Exit status: 0 success; 1 a plugin failed to load, or its device probe failed,\n"
    "crashed or timed out; 2 usage error; 3 format: the string is malformed or uses\n"
    "a dtype nobody understands; 4 internal error (out of memory, a probe process\n"
    "could not be started).\n";

static int usage_error(const char *fmt, const char *arg) {
  fputs("devbuf-info: ", stderr);
  fprintf(stderr, fmt, arg);
  fputs("\nTry 'devbuf-info --help' for the options.\n", stderr);
  return INFO_EXIT_USAGE;
}

static int output_width(void) {
  struct winsize ws;
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col < 60 ? 60 : ws.ws_col;
  const char *c = getenv("COLUMNS");
  if (c && *c) {
    char *end = NULL;
    long v = strtol(c, &end, 10);
    if (end && *end == '\0' && v > 0) return v < 60 ? 60 : v > 500 ? 500 : (int)v;
  }
  return 80;
}

enum { OPT_JSON = 256, OPT_PLUGIN, OPT_PLUGIN_FROM, OPT_ISOLATE, OPT_TIMEOUT, OPT_COLOR, OPT_MODE, OPT_NO_PROBE,
       OPT_IN_PROCESS };

/* A plugin that crashes inside devbuf-info (its entry symbol and init run
 * here; with --in-process, its probe too) would end the run with nothing
 * printed: the listing comes after collection. Say what happened and what to
 * try, with write(2) only, then die of the same signal. */
static const char *g_crash_hint;
static const int g_fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

static void on_fatal(int sig) {
  const char *m = g_crash_hint;
  if (m) {
    size_t n = strlen(m);
    ssize_t w = write(STDERR_FILENO, m, n);
    (void)w;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static void crash_hint(int on, int in_process) {
  g_crash_hint =
      in_process
          ? "devbuf-info: a plugin crashed while devbuf-info loaded the plugins or probed their "
            "devices in this process (--in-process). Run without --in-process: probes then run "
            "in child processes and a crash is reported for its plugin. If it still crashes, it "
            "crashes while loading (its entry symbol or init): load one file at a time, "
            "DEVBUF_NO_DEFAULT_PLUGINS=1 DEVBUF_PLUGINS=/path/devbuf_plugin_X.so devbuf-info\n"
          : "devbuf-info: a plugin crashed while devbuf-info loaded the plugins (each plugin's "
            "entry symbol and init run in this process; only device probes run in child "
            "processes). Load one file at a time to find it: DEVBUF_NO_DEFAULT_PLUGINS=1 "
            "DEVBUF_PLUGINS=/path/devbuf_plugin_X.so devbuf-info\n";
  /* Off puts back what was there (a sanitizer's handlers, say). */
  static struct sigaction saved[sizeof g_fatal / sizeof g_fatal[0]];
  for (size_t i = 0; i < sizeof g_fatal / sizeof g_fatal[0]; i++) {
    if (!on) {
      sigaction(g_fatal[i], &saved[i], NULL);
      continue;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(g_fatal[i], &sa, &saved[i]);
  }
}

static int info_main(int argc, char **argv, const char **extra, const char **sources) {
  static const struct option longopts[] = {
      {"list", no_argument, NULL, 'l'},        {"verbose", no_argument, NULL, 'v'},
      {"help", no_argument, NULL, 'h'},        {"version", no_argument, NULL, 'V'},
      {"json", no_argument, NULL, OPT_JSON},   {"plugin", required_argument, NULL, OPT_PLUGIN},
      {"plugin-from", required_argument, NULL, OPT_PLUGIN_FROM},
      {"isolate", no_argument, NULL, OPT_ISOLATE},
      {"in-process", no_argument, NULL, OPT_IN_PROCESS},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"color", required_argument, NULL, OPT_COLOR},
      {"colour", required_argument, NULL, OPT_COLOR},
      {"mode", required_argument, NULL, OPT_MODE},
      {"no-probe", no_argument, NULL, OPT_NO_PROBE},
      {NULL, 0, NULL, 0}};
  info_options o;
  memset(&o, 0, sizeof o);
  o.timeout_s = 5.0;
  const char *color = "auto";
  const char *mode = NULL;
  int timeout_given = 0, isolate_given = 0, in_process = 0;
  o.extra_plugins = extra;
  o.extra_sources = sources;

  opterr = 0; /* our own messages, with the exit code we document */
  int c;
  while ((c = getopt_long(argc, argv, ":lvhV", longopts, NULL)) != -1) {
    switch (c) {
      case 'l': o.list = 1; break;
      case 'v': o.verbose++; break;
      case 'h': fputs(usage_text, stdout); return INFO_EXIT_OK;
      case 'V': {
        int ma = 0, mi = 0;
        devbuf_abi_version(&ma, &mi);
        printf("devbuf-info %s (runtime %s, plugin ABI %d.%d; built against ABI %d.%d)\n",
               DEVBUF_VERSION_STRING, devbuf_version(), ma, mi, DEVBUF_ABI_MAJOR,
               DEVBUF_ABI_MINOR);
        printf("JSON schema: devbuf-info/1\n");
        return INFO_EXIT_OK;
      }
      case OPT_JSON: o.json = 1; break;
      case OPT_PLUGIN:
        if (optarg[0] == '\0') return usage_error("--plugin needs a file path%s", "");
        o.extra_plugins[o.nextra++] = optarg;
        break;
      case OPT_PLUGIN_FROM: {
        /* LABEL=PATH: split at the first '=' (labels never hold one). */
        char *eq = strchr(optarg, '=');
        if (eq == NULL || eq == optarg || eq[1] == '\0')
          return usage_error("--plugin-from: '%s' is not LABEL=PATH", optarg);
        *eq = '\0';
        o.extra_sources[o.nextra] = optarg;
        o.extra_plugins[o.nextra++] = eq + 1;
        break;
      }
      case OPT_ISOLATE: isolate_given = 1; break;
      case OPT_IN_PROCESS: in_process = 1; break;
      case OPT_NO_PROBE: o.no_probe = 1; break;
      case OPT_TIMEOUT: {
        char *end = NULL;
        errno = 0;
        double v = strtod(optarg, &end);
        if (end == optarg || *end != '\0' || errno || !isfinite(v) || v <= 0 || v > 3600)
          return usage_error("--timeout: '%s' is not a number of seconds in (0, 3600]", optarg);
        o.timeout_s = v;
        timeout_given = 1;
        break;
      }
      case OPT_COLOR:
        if (strcmp(optarg, "auto") && strcmp(optarg, "always") && strcmp(optarg, "never"))
          return usage_error("--color: '%s' is not one of auto, always, never", optarg);
        color = optarg;
        break;
      case OPT_MODE:
        if (strcmp(optarg, "default") && strcmp(optarg, "struct") && strcmp(optarg, "numpy"))
          return usage_error("--mode: '%s' is not one of default, struct, numpy", optarg);
        mode = optarg;
        break;
      case ':':
        if (optopt) {
          char s[2] = {(char)optopt, 0};
          return usage_error("option -%s needs an argument", s);
        }
        return usage_error("option '%s' needs an argument", argv[optind - 1]);
      case '?':
      default:
        if (optopt) {
          char s[2] = {(char)optopt, 0};
          return usage_error("unknown option -%s", s);
        }
        return usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }

  if (strcmp(color, "always") == 0) o.color = 1;
  else if (strcmp(color, "never") == 0) o.color = 0;
  else {
    const char *nc = getenv("NO_COLOR");
    o.color = isatty(STDOUT_FILENO) && !(nc && nc[0]);
  }
  o.width = output_width();

  if (optind < argc) {
    if (strcmp(argv[optind], "format") != 0)
      return usage_error("unknown command '%s' (the only command is 'format STRING')",
                         argv[optind]);
    if (optind + 1 >= argc) return usage_error("format: missing the format STRING%s", "");
    if (optind + 2 < argc)
      return usage_error("format: one STRING only (quote it); unexpected '%s'", argv[optind + 2]);
    if (o.list || isolate_given || in_process || o.nextra || timeout_given || o.no_probe)
      return usage_error("format: -l, --isolate, --in-process, --timeout, --no-probe and --plugin do not "
                         "apply%s", "");
    return info_format_command(stdout, stderr, argv[optind + 1], mode ? mode : "default", &o);
  }
  if (mode) return usage_error("--mode applies only to the format command%s", "");
  if (o.list && o.json) return usage_error("--list and --json cannot be combined%s", "");
  if (o.no_probe && isolate_given)
    return usage_error("--no-probe and --isolate cannot be combined%s", "");
  if (in_process && (isolate_given || o.no_probe))
    return usage_error("--in-process cannot be combined with --isolate or --no-probe%s", "");
  if (timeout_given && o.no_probe)
    return usage_error("--timeout limits device probes, and --no-probe runs none%s", "");
  if (timeout_given && in_process)
    return usage_error("--timeout limits the isolated probes; an --in-process probe "
                       "cannot be interrupted%s", "");
  o.isolate = !o.no_probe && !in_process;

  info_model m;
  devbuf_error err;
  devbuf_error_clear(&err);
  /* Drivers sometimes print. While plugins load and probe, their stdout goes
   * to stderr, so that it can never corrupt the listing or the JSON. */
  fflush(stdout);
  int saved_stdout = dup(STDOUT_FILENO);
  if (saved_stdout >= 0) dup2(STDERR_FILENO, STDOUT_FILENO);
  crash_hint(1, !o.isolate && !o.no_probe);
  int crc = info_collect(&m, &o, &err);
  crash_hint(0, 0);
  fflush(stdout); /* what a plugin left in stdio's buffer goes to stderr too */
  if (saved_stdout >= 0) {
    dup2(saved_stdout, STDOUT_FILENO);
    close(saved_stdout);
  }
  if (crc != DEVBUF_OK) {
    fprintf(stderr, "devbuf-info: %s\n", err.message);
    info_model_free(&m);
    return INFO_EXIT_INTERNAL;
  }
  int rc = info_any_failure(&m) ? INFO_EXIT_PLUGIN_FAILED : INFO_EXIT_OK;
  if (o.json) info_print_json(stdout, &m, &o, rc);
  else if (o.list) info_print_list(stdout, &m, &o);
  else info_print_table(stdout, &m, &o);
  info_model_free(&m);
  if (fflush(stdout) != 0) return INFO_EXIT_INTERNAL;
  return rc;
}

int main(int argc, char **argv) {
  /* A probe process of --isolate (collect.c), started by devbuf-info itself. */
  if (argc == 5 && strcmp(argv[1], "--probe-one") == 0)
    return info_probe_one(argv[2], argv[3], argv[4]);
  /* --plugin arguments; at most one per argument. */
  const char **extra = calloc((size_t)argc + 1, sizeof *extra);
  const char **sources = calloc((size_t)argc + 1, sizeof *sources);
  if (extra == NULL || sources == NULL) {
    free(extra);
    free(sources);
    fputs("devbuf-info: out of memory\n", stderr);
    return INFO_EXIT_INTERNAL;
  }
  int rc = info_main(argc, argv, extra, sources);
  free(extra);
  free(sources);
  return rc;
}
