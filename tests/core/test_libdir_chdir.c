/* The default plugin directory is resolved once, when libdevbuf is loaded
 * (privilege and paths). Loaded by a relative path, then a chdir before devbuf_init:
 * the build tree's plugins (cpu) must still be found, from where libdevbuf
 * really is, not from the new directory. Not linked to libdevbuf: it is
 * dlopen'd by the relative name given as argv[1] (ctest runs this in the
 * library's directory). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "devbuf/runtime.h"

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "FAIL dlopen %s: %s\n", argv[1], dlerror());
    return 1;
  }
  if (chdir("/") != 0) return 1;
  int (*init)(devbuf_error *) = (int (*)(devbuf_error *))dlsym(h, "devbuf_init");
  int (*open_dev)(const char *, devbuf_device *, devbuf_error *) =
      (int (*)(const char *, devbuf_device *, devbuf_error *))dlsym(h, "devbuf_device_open");
  if (init == NULL || open_dev == NULL) {
    fprintf(stderr, "FAIL dlsym\n");
    return 1;
  }
  devbuf_error err;
  if (init(&err) != DEVBUF_OK) {
    fprintf(stderr, "FAIL devbuf_init: %s\n", err.message);
    return 1;
  }
  devbuf_device d;
  if (open_dev("cpu", &d, &err) != DEVBUF_OK) {
    fprintf(stderr, "FAIL the cpu plugin was not found after chdir: %s\n", err.message);
    return 1;
  }
  printf("ok   default plugin directory resolved at load\n1 passed, 0 failed\n");
  return 0;
}
