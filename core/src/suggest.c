/* Near-miss suggestions for a name that was not found: "did you mean ...?".
 * A pure string function; the caller supplies the known names. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* Levenshtein distance of a and b, or `cap` + 1 when it exceeds cap. */
static size_t edit_distance(const char *a, const char *b, size_t cap) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 128 || lb > 128) return cap + 1;
  if ((la > lb ? la - lb : lb - la) > cap) return cap + 1;
  size_t row[129];
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0], best = row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t v = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < v) v = up + 1;
      if (row[j - 1] + 1 < v) v = row[j - 1] + 1;
      row[j] = v;
      diag = up;
      if (v < best) best = v;
    }
    if (best > cap) return cap + 1;
  }
  return row[lb];
}

/* How close `known` is to the `wanted` name that was not found: 0 = not a
 * near miss, else larger is closer. A name that extends the wanted one (the
 * wanted one is its prefix: an unterminated string ran into its neighbour, or
 * a suffix was forgotten) or differs by a few edits (a typo) is a near miss. */
int devbuf__near_miss(const char *wanted, const char *known) {
  size_t lw = strlen(wanted), lk = strlen(known);
  if (lw == 0 || lk == 0 || strcmp(wanted, known) == 0) return 0;
  if (lk > lw && strncmp(known, wanted, lw) == 0) return 1000 - (int)(lk - lw);
  if (lw > lk && strncmp(wanted, known, lk) == 0 && lk >= 3) return 900 - (int)(lw - lk);
  size_t cap = lw < 6 ? 1 : lw < 12 ? 2 : 3;
  size_t d = edit_distance(wanted, known, cap);
  return d <= cap ? 800 - (int)d : 0;
}

/* " (did you mean 'X'?)" for the best near miss among `known`, else "". */
void devbuf__suggest(const char *wanted, const char *const *known, size_t n, char *out,
                     size_t cap) {
  int best = 0;
  const char *pick = NULL;
  for (size_t i = 0; i < n; i++) {
    int s = known[i] ? devbuf__near_miss(wanted, known[i]) : 0;
    if (s > best) best = s, pick = known[i];
  }
  if (pick == NULL) {
    if (cap) out[0] = '\0';
    return;
  }
  if (strncmp(pick, wanted, strlen(wanted)) == 0)
    snprintf(out, cap,
             " (did you mean '%s'? A plugin registers it: if it is meant to be '%s', its "
             "identifier string may lack its terminating NUL)", pick, wanted);
  else
    snprintf(out, cap, " (did you mean '%s'?)", pick);
}
