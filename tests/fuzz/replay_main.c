/* Replays fuzz inputs without libFuzzer, so that the checked-in seed corpus
 * and every crash ever found (tests/fuzz/regress/<target>/) run as ordinary
 * tests in every build, gcc or clang, plain or sanitized.
 *
 *   <target>_replay FILE_OR_DIR...
 *
 * Each file is one input. A property failure aborts, as under libFuzzer;
 * otherwise the driver prints how many inputs it ran and exits 0. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static size_t g_ran;

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return 1;
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  for (;;) {
    if (buf == NULL) break;
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (n < cap) break;
    uint8_t *nb = realloc(buf, cap * 2);
    if (nb == NULL) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  fclose(f);
  if (buf == NULL) {
    fprintf(stderr, "replay: out of memory reading %s\n", path);
    return 1;
  }
  fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
  /* An exact-size copy, so that ASan sees reads past the input's end. */
  uint8_t *exact = malloc(n ? n : 1);
  memcpy(exact, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  g_ran++;
  return 0;
}

static int filter(const struct dirent *d) { return d->d_name[0] != '.'; }

static int run_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "replay: %s does not exist\n", path);
    return 1;
  }
  if (!S_ISDIR(st.st_mode)) return run_file(path);
  struct dirent **list = NULL;
  int n = scandir(path, &list, filter, alphasort);
  if (n < 0) return 1;
  int rc = 0;
  for (int i = 0; i < n; i++) {
    size_t len = strlen(path) + strlen(list[i]->d_name) + 2;
    char *full = malloc(len);
    snprintf(full, len, "%s/%s", path, list[i]->d_name);
    rc |= run_path(full);
    free(full);
    free(list[i]);
  }
  free(list);
  return rc;
}

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  int rc = 0;
  for (int i = 1; i < argc; i++) rc |= run_path(argv[i]);
  printf("replayed %zu input(s)%s\n", g_ran, rc ? " (some paths could not be read)" : "");
  return rc;
}
