/* Plugins' shutdown runs at exit: this program uses two trace
 * plugins (tests/core/exit_plugin.c), leaves an allocation live on purpose,
 * forks a child that exits too, and returns from main. exit_shutdown.sh
 * checks the trace: each shutdown once, in reverse load order, none from the
 * child. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devbuf/runtime.h"

int main(void) {
  devbuf_error err;
  devbuf_device a, b;
  void *p = NULL;
  if (devbuf_device_open("test.exit_a", &a, &err) || devbuf_device_open("test.exit_b", &b, &err) ||
      devbuf_mem_alloc(&a, 64, 0, NULL, &p, &err)) {
    fprintf(stderr, "test_exit_shutdown: %s\n", err.message);
    return 1;
  }
  pid_t child = fork();
  if (child == 0) return 0; /* the child's exit must not shut the parent's plugins down */
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return 1;
  return 0; /* `p` stays allocated: shutdown must cope with live memory */
}
