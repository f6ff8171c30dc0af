/* devbuf-info: what the tool knows, gathered once through the public API of
 * libdevbuf (devbuf/runtime.h, devbuf/format.h) and then rendered as a table,
 * a short list or JSON. Gathering and rendering are separate so that every
 * output form states exactly the same facts. */
#ifndef DEVBUF_INFO_H
#define DEVBUF_INFO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "devbuf/runtime.h"

/* Exit codes (documented in docs/devbuf-info.md and --help). */
#define INFO_EXIT_OK 0
#define INFO_EXIT_PLUGIN_FAILED 1 /* a plugin failed to load, or its probe failed/crashed/hung */
#define INFO_EXIT_USAGE 2
#define INFO_EXIT_BAD_FORMAT 3    /* `format STRING`: malformed or not understood */
#define INFO_EXIT_INTERNAL 4      /* out of memory, posix_spawn/pipe failure */

/* A devbuf_plugin_info string may be NULL; print this instead. */
#define INFO_STR(s) ((s) != NULL ? (s) : "")

/* How the devices of one plugin were (or were not) found. */
enum info_probe {
  INFO_PROBE_NOT_LOADED = 0, /* not probed: the plugin failed to load, or --no-probe */
  INFO_PROBE_OK = 1,         /* device_count succeeded with >= 1 device */
  INFO_PROBE_NO_DEVICE = 2,  /* DEVBUF_ENODEV: the normal "no hardware" answer */
  INFO_PROBE_ERROR = 3,      /* device_count failed with another code, or every device_props */
  INFO_PROBE_CRASHED = 4,    /* --isolate: the probe child died of a signal */
  INFO_PROBE_TIMED_OUT = 5,  /* --isolate: the probe child did not answer in time */
  INFO_PROBE_CHILD_FAILED = 6 /* --isolate: the child exited without a full answer */
};

#define INFO_REASON_MAX DEVBUF_ERROR_MESSAGE_SIZE
#define INFO_MAX_DEVICES 64 /* per plugin; more are counted but not listed */

typedef struct info_device {
  int ordinal;
  int status;                 /* devbuf_status of device_open_ordinal + device_props_get */
  char error[INFO_REASON_MAX];/* why props could not be read, "" when status == OK */
  devbuf_device_props props;
} info_device;

typedef struct info_plugin {
  size_t index;
  devbuf_plugin_info pi;      /* pointers owned by the runtime, valid until exit */
  const char *primary_id;     /* first identifier, or NULL */
  int probe;                  /* enum info_probe */
  int probe_status;           /* devbuf_status from device_count */
  int device_count;           /* as reported (may exceed ndevices) */
  int term_signal;            /* CRASHED: the signal */
  int child_exit;             /* CHILD_FAILED: exit status */
  double probe_ms;            /* wall time of the probe (0 if not probed) */
  char probe_reason[INFO_REASON_MAX];
  size_t ndevices;
  info_device *devices;       /* ndevices entries, malloc'd */
} info_plugin;

typedef struct info_env {
  const char *name;
  const char *value; /* NULL when unset */
} info_env;

typedef struct info_dtype {
  const char *id, *provider, *description, *source;
  const char *file; /* the offering plugin's path, or NULL */
} info_dtype;

typedef struct info_options {
  int verbose;
  int isolate;
  int no_probe;                /* --no-probe: start no driver */
  double timeout_s;
  int json;
  int list;
  int color;                   /* resolved: 1 to use ANSI colour */
  int width;                   /* output width in columns */
  const char **extra_plugins;  /* --plugin and --plugin-from files, in order */
  const char **extra_sources;  /* --plugin-from's LABEL for each, NULL for --plugin */
  size_t nextra;
} info_options;

typedef struct info_model {
  const char *version;
  int abi_major, abi_minor;        /* the runtime's */
  int abi_header_major, abi_header_minor; /* what this tool was compiled with */
  info_env env[3];
  int secure;                      /* secure-execution mode: DEVBUF_* variables ignored */
  int default_plugins;             /* 0 when DEVBUF_NO_DEFAULT_PLUGINS turned step 3 off */
  size_t nsearch;
  const devbuf_search_entry **search;
  size_t nplugins;
  info_plugin *plugins;
  size_t nidents;
  const char **idents;
  size_t *ident_plugin;
  size_t ndtypes;
  info_dtype *dtypes;
  void *dtype_store;               /* the copies dtypes[] points into (owned) */
  int have_dtypes;                 /* 0 when built without the format engine */
  int isolate;
  int no_probe;
  double timeout_s;
  double probe_ms;                 /* wall time spent probing devices */
} info_model;

/* collect.c */
int info_collect(info_model *m, const info_options *o, devbuf_error *err);
void info_model_free(info_model *m);
/* 1 if the run must exit with INFO_EXIT_PLUGIN_FAILED. */
int info_any_failure(const info_model *m);
/* Short machine word for a plugin's state: "ok", "no_device", "load_failed", ... */
const char *info_status_word(const info_plugin *p);
/* "SIGSEGV" etc.; static storage. */
const char *info_signal_name(int sig);

/* The hidden `--probe-one NAME PATH SOURCE` mode: a probe child of
 * --isolate (collect.c). Never returns. */
int info_probe_one(const char *name, const char *path, const char *source);

/* text.c */
void info_print_table(FILE *out, const info_model *m, const info_options *o);
void info_print_list(FILE *out, const info_model *m, const info_options *o);
/* Human-readable reason for a plugin that is not usable, or "" (static/ model storage
 * or `buf`). */
const char *info_plugin_reason(const info_plugin *p, char *buf, size_t cap);
/* Write `text` wrapped to `width` columns; the first line is preceded by
 * `first` (already printed by the caller, its display length `used`), the
 * continuation lines are indented by `indent` spaces. Never drops text: a
 * word longer than a line is broken. */
void info_wrap(FILE *out, const char *text, int used, int indent, int width);
void info_human_bytes(uint64_t n, char *buf, size_t cap);

/* json.c */
void info_print_json(FILE *out, const info_model *m, const info_options *o, int exit_code);
void info_json_string(FILE *out, const char *s);

/* format_cmd.c */
int info_format_command(FILE *out, FILE *errout, const char *fmt, const char *mode,
                        const info_options *o);

/* The first optional table field that the plugin's struct_size cuts off
 * (reads as NULL), or NULL when its table holds every field this devbuf-info
 * knows. */
const char *info_table_cut(const devbuf_plugin_table *t);

#endif /* DEVBUF_INFO_H */
