/* Two threads call the race planted in libdevbuf (core/src/tsan_plant.c,
 * DEVBUF_TSAN_PLANT_RACE=ON) at once. Under ThreadSanitizer this program must
 * be reported and fail (tsan_planted.sh checks both); it is the ThreadSanitizer
 * stage's proof that it can go red. */
#include <pthread.h>
#include <stdio.h>

long devbuf_tsan_planted_race(long iterations);

static pthread_barrier_t g_start;

static void *worker(void *arg) {
  (void)arg;
  pthread_barrier_wait(&g_start);
  devbuf_tsan_planted_race(100000);
  return NULL;
}

int main(void) {
  pthread_t t[2];
  pthread_barrier_init(&g_start, NULL, 2);
  for (int i = 0; i < 2; i++)
    if (pthread_create(&t[i], NULL, worker, NULL) != 0) {
      fprintf(stderr, "test_tsan_planted: pthread_create failed\n");
      return 2;
    }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  /* A lost update is possible (that is the race); the count is not checked. */
  printf("planted counter: %ld\n", devbuf_tsan_planted_race(0));
  return 0;
}
