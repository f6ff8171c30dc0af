/* Gathering facts: plugins, identifiers, devices, dtype namespaces.
 *
 * Device probing is the only step that runs driver code (a plugin's
 * device_count may initialise CUDA, an OpenCL ICD, ...). By default (the
 * same as --isolate) each loaded plugin is probed in a child process that
 * loads that one plugin afresh (devbuf-info run again with the hidden
 * --probe-one mode, started with posix_spawn) and writes fixed-size records
 * into a pipe, so that a driver which crashes or never returns costs one
 * child, not the listing. The child never inherits a loaded plugin: a
 * runtime that starts threads when its library is loaded (Go's, a CUDA
 * driver after cuInit) has no threads in a forked copy, and the copy's first
 * call into it waits forever. All children run at
 * once and share one deadline, so the whole probe is bounded by --timeout
 * however many plugins hang. Children are also faster than probing here:
 * they _exit() without running the drivers' teardown. --in-process probes
 * on the calling thread instead (for a debugger, or where fork is unwanted). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "info.h"

#ifdef DEVBUF_INFO_HAVE_FORMAT
#include "devbuf/format.h"
#endif

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

const char *info_signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGABRT: return "SIGABRT";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGTRAP: return "SIGTRAP";
    case SIGSYS: return "SIGSYS";
    case SIGPIPE: return "SIGPIPE";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGHUP: return "SIGHUP";
    case SIGALRM: return "SIGALRM";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    default: return NULL;
  }
}

const char *info_status_word(const info_plugin *p) {
  if (p->pi.state == DEVBUF_PLUGIN_FAILED) return "load_failed";
  if (p->pi.state == DEVBUF_PLUGIN_UNREGISTERED) return "unregistered";
  switch (p->probe) {
    case INFO_PROBE_OK: return "ok";
    case INFO_PROBE_NO_DEVICE: return "no_device";
    case INFO_PROBE_ERROR: return "probe_failed";
    case INFO_PROBE_CRASHED: return "crashed";
    case INFO_PROBE_TIMED_OUT: return "timed_out";
    case INFO_PROBE_CHILD_FAILED: return "probe_failed";
    default: return "not_probed";
  }
}

int info_any_failure(const info_model *m) {
  for (size_t i = 0; i < m->nplugins; i++) {
    const info_plugin *p = &m->plugins[i];
    if (p->pi.state == DEVBUF_PLUGIN_FAILED) return 1;
    if (p->probe == INFO_PROBE_ERROR || p->probe == INFO_PROBE_CRASHED ||
        p->probe == INFO_PROBE_TIMED_OUT || p->probe == INFO_PROBE_CHILD_FAILED)
      return 1;
    /* A device whose device_props failed is a failed device probe. */
    for (size_t d = 0; d < p->ndevices; d++)
      if (p->devices[d].status != DEVBUF_OK) return 1;
  }
  return 0;
}

/* The runtime prefixes device_count failures with "NAME: no device: "; the
 * listing already names the plugin and its status, so keep only the why. */
static void set_reason(info_plugin *p, const char *msg) {
  const char *name = p->pi.name;
  if (name != NULL) {
    size_t n = strlen(name);
    if (strncmp(msg, name, n) == 0 && strncmp(msg + n, ": no device: ", 13) == 0)
      msg += n + 13;
  }
  snprintf(p->probe_reason, sizeof p->probe_reason, "%s", msg);
}

static void probe_plugin_untimed(info_plugin *p);

/* In a --probe-one child: the pipe to the parent, where one byte before each
 * step says what the child is about to do (STAGE_*), so that a hang or a
 * crash is reported with the call it happened in. -1 elsewhere. */
static int g_stage_fd = -1;
#define STAGE_LOAD 'l'  /* loading the plugin: its entry symbol and init */
#define STAGE_COUNT 'c' /* device_count */
#define STAGE_PROPS 'p' /* device_open_ordinal + device_props */

static void stage(char what) {
  if (g_stage_fd < 0) return;
  ssize_t w;
  do w = write(g_stage_fd, &what, 1); while (w < 0 && errno == EINTR);
}

/* Probe one plugin in this process: device count, then each device's props. */
static void probe_plugin(info_plugin *p) {
  double t0 = now_ms();
  probe_plugin_untimed(p);
  p->probe_ms = now_ms() - t0;
}

/* --in-process: every probe on the calling thread, one after another.
 *
 * Not on probe threads: vendor libraries tie state to the thread that first
 * calls them. LLVM inside PoCL replaces an alternate signal stack it finds
 * too small with its own malloc'd one, and libamdhip64's constructors keep
 * per-thread allocations. A probe thread that exits with such state loses
 * it (LeakSanitizer reports the vendor's blocks) or, under AddressSanitizer,
 * has ASan unmap LLVM's heap block as if it were its own stack and abort;
 * whether LLVM swaps the stack depends on the CPU's signal-frame size
 * (AT_MINSIGSTKSZ), so the failure came and went with the host's CPU. And a
 * thread parked until exit keeps its state but breaks LeakSanitizer's
 * scan of dynamic TLS on this toolchain. The calling thread lives as long as
 * the process, on every CPU. Speed and a deadline come from the default,
 * isolated probing below, which runs every plugin at once in children. */
static void probe_in_process(info_model *m) {
  for (size_t i = 0; i < m->nplugins; i++) {
    info_plugin *p = &m->plugins[i];
    if (p->pi.state != DEVBUF_PLUGIN_LOADED)
      p->probe = INFO_PROBE_NOT_LOADED;
    else
      probe_plugin(p);
  }
}

static void probe_plugin_untimed(info_plugin *p) {
  if (p->pi.state != DEVBUF_PLUGIN_LOADED || p->primary_id == NULL) {
    p->probe = INFO_PROBE_NOT_LOADED;
    return;
  }
  devbuf_error e;
  devbuf_error_clear(&e);
  int n = 0;
  stage(STAGE_COUNT);
  int rc = devbuf_plugin_device_count(p->index, &n, &e);
  p->probe_status = rc;
  if (rc != DEVBUF_OK) {
    p->probe = rc == DEVBUF_ENODEV ? INFO_PROBE_NO_DEVICE : INFO_PROBE_ERROR;
    set_reason(p, e.message[0] ? e.message : devbuf_status_name(rc));
    return;
  }
  p->probe = INFO_PROBE_OK;
  p->device_count = n;
  size_t nd = n < INFO_MAX_DEVICES ? (size_t)n : INFO_MAX_DEVICES;
  p->devices = calloc(nd ? nd : 1, sizeof *p->devices);
  if (p->devices == NULL) return;
  p->ndevices = nd;
  for (size_t d = 0; d < nd; d++) {
    info_device *dv = &p->devices[d];
    devbuf_device dev;
    dv->ordinal = (int)d;
    devbuf_error_clear(&e);
    stage(STAGE_PROPS);
    rc = devbuf_device_open_ordinal(p->primary_id, (int)d, &dev, &e);
    if (rc == DEVBUF_OK) {
      dv->props.struct_size = sizeof dv->props;
      rc = devbuf_device_props_get(&dev, &dv->props, &e);
    }
    dv->status = rc;
    if (rc != DEVBUF_OK) snprintf(dv->error, sizeof dv->error, "%s", e.message);
  }
  /* Devices that all refuse device_props are no working device: not "ok"
   * (the listing said ok and exited 0). */
  size_t refused = 0;
  for (size_t d = 0; d < nd; d++) refused += p->devices[d].status != DEVBUF_OK;
  if (nd > 0 && refused == nd) {
    p->probe = INFO_PROBE_ERROR;
    p->probe_status = p->devices[0].status;
    snprintf(p->probe_reason, sizeof p->probe_reason,
             "device_props failed for every device (%zu of %zu), e.g. device 0: %s", refused, nd,
             p->devices[0].error);
  }
}

/* ---- --isolate -------------------------------------------------------------- */

#define PROBE_MAGIC 0x44425046 /* "DBPF" */

typedef struct probe_record {
  int32_t magic;
  int32_t probe;
  int32_t status;
  int32_t count;
  int32_t ndevices;
  char reason[INFO_REASON_MAX];
} probe_record;

static int write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* The file descriptor a --probe-one child writes its records to. */
#define PROBE_FD 3

/* `devbuf-info --probe-one NAME PATH SOURCE`: the child's side. Load the
 * plugin afresh, probe it, send stage bytes and the records to PROBE_FD, and
 * leave without running atexit handlers or plugin destructors. A plugin of
 * devbuf's own directories (SOURCE "install" or "build tree") comes from the
 * runtime's default loading, which alone grants those privileges (the `cpu`
 * identifier); any other is loaded from PATH alone, with nothing else. */
int info_probe_one(const char *name, const char *path, const char *source) {
  struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core); /* a crashing driver should not dump core */
  /* Die of the signal itself, so that the parent can name it: no handler
   * (one a sanitizer installs, say) may turn a crash into an ordinary exit. */
  static const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};
  for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++) signal(fatal[i], SIG_DFL);
  g_stage_fd = PROBE_FD;
  int own = strcmp(source, "install") == 0 || strcmp(source, "build tree") == 0;
  /* The others are probed by children of their own. */
  if (!own) setenv("DEVBUF_NO_DEFAULT_PLUGINS", "1", 1);
  unsetenv("DEVBUF_PLUGINS");
  unsetenv("DEVBUF_PLUGIN_PATH");
  info_plugin p;
  memset(&p, 0, sizeof p);
  stage(STAGE_LOAD);
  devbuf_error err;
  devbuf_error_clear(&err);
  int rc = devbuf_init(&err);
  if (rc == DEVBUF_OK && !own) devbuf_plugin_load(path, NULL, NULL);
  int found = 0;
  for (size_t i = 0; rc == DEVBUF_OK && !found && i < devbuf_plugin_count(); i++) {
    memset(&p.pi, 0, sizeof p.pi);
    p.pi.struct_size = sizeof p.pi;
    if (devbuf_plugin_info_get(i, &p.pi, NULL) != DEVBUF_OK) continue;
    found = p.pi.path != NULL && strcmp(p.pi.path, path) == 0;
    p.index = i;
  }
  if (!found) {
    p.probe = INFO_PROBE_ERROR;
    p.probe_status = rc != DEVBUF_OK ? rc : DEVBUF_EINTERNAL;
    snprintf(p.probe_reason, sizeof p.probe_reason, "the probe process could not load %s again%s%s",
             path, rc != DEVBUF_OK ? ": " : "", rc != DEVBUF_OK ? err.message : "");
    (void)name;
  } else if (p.pi.state != DEVBUF_PLUGIN_LOADED) {
    p.probe = INFO_PROBE_ERROR;
    p.probe_status = DEVBUF_EINTERNAL;
    snprintf(p.probe_reason, sizeof p.probe_reason,
             "loaded in devbuf-info but not in its probe process: %s", INFO_STR(p.pi.reason));
  } else {
    p.primary_id = p.pi.identifiers && p.pi.identifiers[0] ? p.pi.identifiers[0] : NULL;
    probe_plugin(&p);
  }
  probe_record r;
  memset(&r, 0, sizeof r);
  r.magic = PROBE_MAGIC;
  r.probe = p.probe;
  r.status = p.probe_status;
  r.count = p.device_count;
  r.ndevices = (int32_t)p.ndevices;
  memcpy(r.reason, p.probe_reason, sizeof r.reason);
  int bad = write_all(PROBE_FD, &r, sizeof r);
  for (size_t d = 0; !bad && d < p.ndevices; d++)
    bad = write_all(PROBE_FD, &p.devices[d], sizeof p.devices[d]);
  fflush(NULL);
  _exit(bad ? 3 : 0);
}

typedef struct probe_child {
  pid_t pid;
  double t_start, t_end; /* spawn, and when its pipe closed or it was reaped */
  int fd;          /* read end, -1 once EOF */
  char *buf;
  size_t len, cap;
  int exited;      /* waitpid collected it, or its whole result arrived */
  int wstatus;
} probe_child;

/* The stage bytes that come before the record: how many, and the last
 * (0 when none arrived: the child had not started loading the plugin). */
static size_t child_stages(const probe_child *c, char *last) {
  size_t n = 0;
  *last = 0;
  while (n < c->len &&
         (c->buf[n] == STAGE_LOAD || c->buf[n] == STAGE_COUNT || c->buf[n] == STAGE_PROPS))
    *last = c->buf[n++];
  return n;
}

/* Has the child sent a whole result? It _exits right after writing one, so
 * the parent need not wait for its exit: the kernel tearing down a driver's
 * address space (PoCL maps LLVM) took ~4 ms before the pipe closed. */
static int child_complete(const probe_child *c) {
  probe_record r;
  char last;
  size_t off = child_stages(c, &last);
  if (c->len - off < sizeof r) return 0;
  memcpy(&r, c->buf + off, sizeof r);
  return r.magic == PROBE_MAGIC && r.ndevices >= 0 && r.ndevices <= INFO_MAX_DEVICES &&
         c->len - off == sizeof r + (size_t)r.ndevices * sizeof(info_device);
}

/* What a child whose process hung or died was doing, from its last stage. */
static const char *stage_words(char last) {
  switch (last) {
    case STAGE_COUNT: return "device_count";
    case STAGE_PROPS: return "device_props";
    default: return "loading the plugin (its entry symbol or init)";
  }
}

static void child_read(probe_child *c) {
  for (;;) {
    if (c->cap - c->len < 4096) {
      size_t ncap = c->cap ? c->cap * 2 : 8192;
      char *nb = realloc(c->buf, ncap);
      if (nb == NULL) { close(c->fd); c->fd = -1; return; }
      c->buf = nb;
      c->cap = ncap;
    }
    ssize_t r = read(c->fd, c->buf + c->len, c->cap - c->len);
    if (r > 0) { c->len += (size_t)r; continue; }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    close(c->fd); /* EOF or error */
    c->fd = -1;
    c->t_end = now_ms();
    return;
  }
}

/* Turn what a finished child sent into the plugin's probe result. */
static void child_result(info_plugin *p, probe_child *c, double timeout_s) {
  char last;
  size_t off = child_stages(c, &last);
  const char *name = INFO_STR(p->pi.name);
  if (!c->exited) {
    p->probe = INFO_PROBE_TIMED_OUT;
    p->probe_status = DEVBUF_ETIMEDOUT;
    if (last == STAGE_COUNT || last == STAGE_PROPS)
      snprintf(p->probe_reason, sizeof p->probe_reason,
               "timed out after %g s: %s of %s did not return; probe process killed",
               timeout_s, stage_words(last), name);
    else
      snprintf(p->probe_reason, sizeof p->probe_reason,
               "timed out after %g s: %s hung while loading in the probe process (its entry "
               "symbol or init did not return); probe process killed", timeout_s, name);
    return;
  }
  if (WIFSIGNALED(c->wstatus)) {
    int sig = WTERMSIG(c->wstatus);
    const char *sn = info_signal_name(sig);
    char sbuf[32];
    if (sn == NULL) { snprintf(sbuf, sizeof sbuf, "signal %d", sig); sn = sbuf; }
    p->probe = INFO_PROBE_CRASHED;
    p->probe_status = DEVBUF_EBACKEND;
    p->term_signal = sig;
    if (last == STAGE_COUNT || last == STAGE_PROPS)
      snprintf(p->probe_reason, sizeof p->probe_reason,
               "crashed: %s (%s) while probing devices (in %s)", sn, strsignal(sig),
               stage_words(last));
    else
      snprintf(p->probe_reason, sizeof p->probe_reason,
               "crashed: %s (%s) while loading %s in the probe process (its entry symbol or "
               "init)", sn, strsignal(sig), name);
    return;
  }
  probe_record r;
  size_t len = c->len - off;
  if (len >= sizeof r) memcpy(&r, c->buf + off, sizeof r);
  int ok = WIFEXITED(c->wstatus) && WEXITSTATUS(c->wstatus) == 0 && len >= sizeof r &&
           r.magic == PROBE_MAGIC && r.ndevices >= 0 && r.ndevices <= INFO_MAX_DEVICES &&
           len == sizeof r + (size_t)r.ndevices * sizeof(info_device);
  if (!ok) {
    p->probe = INFO_PROBE_CHILD_FAILED;
    p->probe_status = DEVBUF_EINTERNAL;
    p->child_exit = WIFEXITED(c->wstatus) ? WEXITSTATUS(c->wstatus) : -1;
    snprintf(p->probe_reason, sizeof p->probe_reason,
             "probe process exited with status %d after sending %zu bytes (expected a full "
             "result); the plugin may have called exit()", p->child_exit, len);
    return;
  }
  p->probe = r.probe;
  p->probe_status = r.status;
  p->device_count = r.count;
  r.reason[sizeof r.reason - 1] = '\0';
  memcpy(p->probe_reason, r.reason, sizeof p->probe_reason);
  if (r.ndevices > 0) {
    p->devices = calloc((size_t)r.ndevices, sizeof *p->devices);
    if (p->devices != NULL) {
      memcpy(p->devices, c->buf + off + sizeof r, (size_t)r.ndevices * sizeof *p->devices);
      p->ndevices = (size_t)r.ndevices;
      for (size_t d = 0; d < p->ndevices; d++) {
        p->devices[d].error[sizeof p->devices[d].error - 1] = '\0';
        p->devices[d].props.name[sizeof p->devices[d].props.name - 1] = '\0';
        p->devices[d].props.vendor[sizeof p->devices[d].props.vendor - 1] = '\0';
      }
    }
  }
}

extern char **environ;

/* Start `devbuf-info --probe-one` for plugin p, its records on the write end
 * `wfd` (which becomes the child's PROBE_FD). posix_spawn, not fork: the
 * child must load the plugin itself (see the top of this file). */
static int spawn_probe(const char *exe, const info_plugin *p, int wfd, pid_t *pid) {
  posix_spawn_file_actions_t fa;
  int rc = posix_spawn_file_actions_init(&fa);
  if (rc != 0) return rc;
  rc = posix_spawn_file_actions_adddup2(&fa, wfd, PROBE_FD);
  char *argv[] = {(char *)"devbuf-info", (char *)"--probe-one", (char *)INFO_STR(p->pi.name),
                  (char *)INFO_STR(p->pi.path), (char *)INFO_STR(p->pi.source), NULL};
  if (rc == 0) rc = posix_spawn(pid, exe, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  return rc;
}

static int probe_isolated(info_model *m, double timeout_s, devbuf_error *err) {
  char exe[4096];
  ssize_t en = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (en <= 0 || (size_t)en >= sizeof exe - 1)
    return devbuf_error_set(err, DEVBUF_EINTERNAL,
                            "--isolate: cannot find this program to run its probes "
                            "(/proc/self/exe: %s); try --in-process", strerror(errno));
  exe[en] = '\0';
  probe_child *kids = calloc(m->nplugins ? m->nplugins : 1, sizeof *kids);
  if (kids == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "--isolate: out of memory");
  fflush(NULL); /* a child must not re-emit our buffered output */
  int rc = DEVBUF_OK;
  for (size_t i = 0; i < m->nplugins; i++) {
    info_plugin *p = &m->plugins[i];
    kids[i].pid = -1;
    kids[i].fd = -1;
    if (p->pi.state != DEVBUF_PLUGIN_LOADED) { p->probe = INFO_PROBE_NOT_LOADED; continue; }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      rc = devbuf_error_set(err, DEVBUF_EINTERNAL, "--isolate: pipe: %s", strerror(errno));
      break;
    }
    /* dup2 onto the same number would keep O_CLOEXEC: keep the write end off PROBE_FD. */
    if (fds[1] == PROBE_FD) {
      int moved = fcntl(fds[1], F_DUPFD_CLOEXEC, PROBE_FD + 1);
      close(fds[1]);
      fds[1] = moved;
    }
    pid_t pid = -1;
    int src = fds[1] < 0 ? EMFILE : spawn_probe(exe, p, fds[1], &pid);
    if (src != 0) {
      close(fds[0]);
      if (fds[1] >= 0) close(fds[1]);
      rc = devbuf_error_set(err, DEVBUF_EINTERNAL, "--isolate: posix_spawn %s: %s", exe,
                            strerror(src));
      break;
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    kids[i].pid = pid;
    kids[i].fd = fds[0];
    kids[i].t_start = now_ms();
  }

  double deadline = now_ms() + timeout_s * 1e3;
  struct pollfd *pfd = calloc(m->nplugins ? m->nplugins : 1, sizeof *pfd);
  size_t *owner = calloc(m->nplugins ? m->nplugins : 1, sizeof *owner);
  for (;;) {
    size_t n = 0;
    int waiting = 0;
    for (size_t i = 0; i < m->nplugins; i++) {
      probe_child *c = &kids[i];
      if (c->pid < 0 || c->exited) continue;
      if (c->fd < 0) { /* pipe closed: collect the child if it is done */
        pid_t w = waitpid(c->pid, &c->wstatus, WNOHANG);
        if (w == c->pid) { c->exited = 1; continue; }
      }
      waiting = 1;
      if (c->fd >= 0 && pfd != NULL && owner != NULL) {
        pfd[n].fd = c->fd;
        pfd[n].events = POLLIN;
        owner[n++] = i;
      }
    }
    if (!waiting) break;
    double left = deadline - now_ms();
    if (left <= 0) break;
    /* When only exits are awaited (pipes closed), poll briefly for them. */
    int wait_ms = n == 0 ? 2 : (int)(left + 1);
    if (wait_ms > (int)(left + 1)) wait_ms = (int)(left + 1);
    int pr = poll(pfd, n, wait_ms);
    if (pr < 0 && errno != EINTR) break;
    for (size_t k = 0; pr > 0 && k < n; k++) {
      if (!pfd[k].revents) continue;
      probe_child *c = &kids[owner[k]];
      child_read(c);
      if (!c->exited && child_complete(c)) {
        /* Done: reap it if it is gone already, else let it finish its
         * _exit on its own (a zombie until we exit, then init's). */
        if (waitpid(c->pid, &c->wstatus, WNOHANG) != c->pid) c->wstatus = 0;
        c->exited = 1;
        if (c->fd >= 0) {
          close(c->fd);
          c->fd = -1;
        }
        if (c->t_end == 0) c->t_end = now_ms();
      }
    }
  }
  free(pfd);
  free(owner);

  for (size_t i = 0; i < m->nplugins; i++) {
    probe_child *c = &kids[i];
    if (c->pid < 0) continue;
    if (!c->exited) {
      /* Give a child that already closed its pipe one last chance, then kill. */
      if (waitpid(c->pid, &c->wstatus, WNOHANG) == c->pid) {
        c->exited = 1;
      } else {
        kill(c->pid, SIGKILL);
        while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR) {}
      }
    }
    if (c->fd >= 0) close(c->fd);
    if (c->t_end == 0) c->t_end = now_ms();
    child_result(&m->plugins[i], c, timeout_s);
    m->plugins[i].probe_ms = c->t_end - c->t_start;
    free(c->buf);
  }
  free(kids);
  return rc;
}

/* ---- the model ------------------------------------------------------------------ */

int info_collect(info_model *m, const info_options *o, devbuf_error *err) {
  memset(m, 0, sizeof *m);
  m->isolate = o->isolate;
  m->no_probe = o->no_probe;
  m->timeout_s = o->timeout_s;
  m->version = devbuf_version();
  devbuf_abi_version(&m->abi_major, &m->abi_minor);
  m->abi_header_major = DEVBUF_ABI_MAJOR;
  m->abi_header_minor = DEVBUF_ABI_MINOR;
  static const char *const vars[3] = {"DEVBUF_PLUGINS", "DEVBUF_PLUGIN_PATH",
                                      "DEVBUF_NO_DEFAULT_PLUGINS"};
  for (int i = 0; i < 3; i++) {
    m->env[i].name = vars[i];
    m->env[i].value = secure_getenv(vars[i]); /* what the runtime sees */
  }
  m->secure = devbuf_secure_execution();
  /* The runtime's own rule: set, non-empty and not "0" turns defaults off. */
  const char *nd = m->env[2].value;
  m->default_plugins = !(nd && nd[0] && strcmp(nd, "0") != 0);

  int rc = devbuf_init(err);
  if (rc != DEVBUF_OK) return rc;
  for (size_t i = 0; i < o->nextra; i++) { /* failures are recorded */
    if (o->extra_sources && o->extra_sources[i])
      devbuf_plugin_load_from(o->extra_plugins[i], o->extra_sources[i], NULL, NULL);
    else
      devbuf_plugin_load(o->extra_plugins[i], NULL, NULL);
  }

  m->nsearch = devbuf_search_path_count();
  m->search = calloc(m->nsearch ? m->nsearch : 1, sizeof *m->search);
  m->nplugins = devbuf_plugin_count();
  m->plugins = calloc(m->nplugins ? m->nplugins : 1, sizeof *m->plugins);
  if (m->search == NULL || m->plugins == NULL)
    return devbuf_error_set(err, DEVBUF_ENOMEM, "out of memory");
  for (size_t i = 0; i < m->nsearch; i++) m->search[i] = devbuf_search_path_get(i);

  for (size_t i = 0; i < m->nplugins; i++) {
    info_plugin *p = &m->plugins[i];
    p->index = i;
    p->pi.struct_size = sizeof p->pi;
    rc = devbuf_plugin_info_get(i, &p->pi, err);
    if (rc != DEVBUF_OK) return rc;
    p->primary_id = p->pi.identifiers && p->pi.identifiers[0] ? p->pi.identifiers[0] : NULL;
  }

  m->nidents = devbuf_identifier_count();
  m->idents = calloc(m->nidents ? m->nidents : 1, sizeof *m->idents);
  m->ident_plugin = calloc(m->nidents ? m->nidents : 1, sizeof *m->ident_plugin);
  if (m->idents == NULL || m->ident_plugin == NULL)
    return devbuf_error_set(err, DEVBUF_ENOMEM, "out of memory");
  size_t k = 0;
  for (size_t i = 0; i < m->nidents; i++) {
    const char *id = devbuf_identifier_get(i, &m->ident_plugin[k]);
    if (id != NULL) m->idents[k++] = id;
  }
  m->nidents = k;

  double t0 = now_ms();
  if (o->no_probe) {
    /* Nothing heavy unless asked: statuses stay "not probed". */
  } else if (o->isolate) {
    rc = probe_isolated(m, o->timeout_s, err);
    if (rc != DEVBUF_OK) return rc;
  } else {
    probe_in_process(m);
  }
  m->probe_ms = now_ms() - t0;

#ifdef DEVBUF_INFO_HAVE_FORMAT
  m->have_dtypes = 1;
  /* One pass, copied (devbuf_dtype_namespace_list), again if the set grew
   * meanwhile; m->dtype_store keeps the copies that dtypes[] points into. */
  devbuf_dtype_namespace_info *info = NULL;
  size_t nns = 0, cap = 0;
  while ((nns = devbuf_dtype_namespace_list(info, cap)) > cap) {
    free(info);
    cap = nns + 8;
    info = calloc(cap, sizeof *info);
    if (info == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "out of memory");
  }
  m->dtype_store = info;
  m->dtypes = calloc(nns ? nns : 1, sizeof *m->dtypes);
  if (m->dtypes == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "out of memory");
  for (size_t i = 0; i < nns; i++) {
    const devbuf_dtype_namespace_info *x = &info[i];
    const char *source = x->source;
    info_dtype *d = &m->dtypes[m->ndtypes++];
    d->id = x->id;
    d->provider = x->provider;
    d->description = x->description;
    d->source = source;
    /* The plugin's file, so that a dtype owner's plugin (which may offer
     * nothing else) is found where it is. */
    for (size_t q = 0; q < m->nplugins && d->file == NULL; q++)
      if (m->plugins[q].pi.state == DEVBUF_PLUGIN_LOADED && m->plugins[q].pi.name &&
          strcmp(m->plugins[q].pi.name, source) == 0)
        d->file = m->plugins[q].pi.path;
  }
#else
  /* Without the format engine, the namespaces that loaded plugins offer. */
  size_t cap = 0;
  for (size_t i = 0; i < m->nplugins; i++) {
    const devbuf_plugin_table *t = m->plugins[i].pi.table;
    for (size_t j = 0; t && t->dtype_namespaces && t->dtype_namespaces[j]; j++) cap++;
  }
  m->dtypes = calloc(cap ? cap : 1, sizeof *m->dtypes);
  if (m->dtypes == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "out of memory");
  for (size_t i = 0; i < m->nplugins; i++) {
    const devbuf_plugin_table *t = m->plugins[i].pi.table;
    for (size_t j = 0; t && t->dtype_namespaces && t->dtype_namespaces[j]; j++) {
      const devbuf_dtype_namespace *ns = t->dtype_namespaces[j];
      info_dtype *d = &m->dtypes[m->ndtypes++];
      d->id = INFO_STR(ns->id);
      d->provider = INFO_STR(ns->provider);
      d->description = INFO_STR(ns->description);
      d->source = INFO_STR(m->plugins[i].pi.name);
      d->file = m->plugins[i].pi.path;
    }
  }
#endif
  return DEVBUF_OK;
}

void info_model_free(info_model *m) {
  for (size_t i = 0; m->plugins && i < m->nplugins; i++) free(m->plugins[i].devices);
  free(m->plugins);
  free(m->search);
  free(m->idents);
  free(m->ident_plugin);
  free(m->dtypes);
  free(m->dtype_store);
  memset(m, 0, sizeof *m);
}

const char *info_table_cut(const devbuf_plugin_table *t) {
  static const struct {
    const char *name;
    size_t end;
  } fields[] = {
      {"device_info_export", offsetof(devbuf_plugin_table, device_info_export) + sizeof(void *)},
      {"device_info_import", offsetof(devbuf_plugin_table, device_info_import) + sizeof(void *)},
      {"dtype_namespaces", offsetof(devbuf_plugin_table, dtype_namespaces) + sizeof(void *)},
      {"host_alloc", offsetof(devbuf_plugin_table, host_alloc) + sizeof(void *)},
      {"host_free", offsetof(devbuf_plugin_table, host_free) + sizeof(void *)},
      {"ext_functions", offsetof(devbuf_plugin_table, ext_functions) + sizeof(void *)},
      {"ext_function_count", offsetof(devbuf_plugin_table, ext_function_count) + sizeof(size_t)},
  };
  if (t == NULL) return NULL;
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
    if (t->struct_size < fields[i].end) return fields[i].name;
  return NULL;
}
