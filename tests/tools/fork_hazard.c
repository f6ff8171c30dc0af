/* The control for devbuf-info's fork_safety case: shows that the
 * load_thread test plugin really has the fork hazard, so that its passing
 * probes in devbuf-info mean something. Loads the plugin here (its
 * constructor starts its worker thread), forks, and calls device_count in
 * the copy, which has no worker.
 *
 *   fork_hazard PLUGIN.so   exit 0: the forked call hung, as it must;
 *                           exit 1: it returned (the plugin does not
 *                           reproduce the hazard); 2: setup failed. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "devbuf/plugin.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PLUGIN.so\n", argv[0]);
    return 2;
  }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "fork_hazard: dlopen: %s\n", dlerror());
    return 2;
  }
  const devbuf_plugin_table *(*entry)(void) =
      (const devbuf_plugin_table *(*)(void))dlsym(h, DEVBUF_PLUGIN_ENTRY_NAME);
  if (entry == NULL) {
    fprintf(stderr, "fork_hazard: no %s in %s\n", DEVBUF_PLUGIN_ENTRY_NAME, argv[1]);
    return 2;
  }
  const devbuf_plugin_table *t = entry();
  void *state = NULL;
  devbuf_error err;
  devbuf_error_clear(&err);
  int n = 0;
  if (t->init(&state, &err) != DEVBUF_OK || t->device_count(state, &n, &err) != DEVBUF_OK) {
    fprintf(stderr, "fork_hazard: the plugin does not work in the process that loaded it\n");
    return 2;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) _exit(t->device_count(state, &n, &err) == DEVBUF_OK ? 0 : 3);
  for (int i = 0; i < 40; i++) { /* 2 s */
    if (waitpid(pid, NULL, WNOHANG) == pid) {
      printf("fork_hazard: device_count returned in a forked copy: %s does not reproduce "
             "the hazard\n", argv[1]);
      return 1;
    }
    nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  printf("fork_hazard: device_count in a copy forked after loading hung for 2 s, as expected\n");
  return 0;
}
