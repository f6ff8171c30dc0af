/* tsan_plant.c: a data race planted on purpose, compiled into libdevbuf only
 * when it is configured with DEVBUF_TSAN_PLANT_RACE=ON (the default of a
 * DEVBUF_SANITIZE=thread build, never of any other). Nothing in devbuf calls
 * it; tests/stress/test_tsan_planted.c calls it from two threads at once, and
 * the ThreadSanitizer stage expects TSan to report the race inside libdevbuf:
 * a stage that cannot see this one cannot be trusted to see a real one. */
#include "devbuf/export.h"

DEVBUF_API long devbuf_tsan_planted_race(long iterations);

/* Shared, unsynchronised: no lock, no atomic. */
static long g_planted_counter;

DEVBUF_API long devbuf_tsan_planted_race(long iterations) {
  for (long i = 0; i < iterations; i++) g_planted_counter++;
  return g_planted_counter;
}
