/* test_compact_kinds.c - the table of compact storage's particle kinds (src/compact_kinds.h):
 * indices dense in the order first met and stable as the table grows; a kind met again gets its
 * index back, also past many others; kinds compare by their bits; the 65,537th distinct kind is
 * refused with the reason and the way out, the table as it was. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "compact_kinds.h"
#include "error.h"

static compact_kind kind_of(int i) {
  return (compact_kind){.mass = 1e-3f * (float)(i % 251 + 1), .vol0 = 1e-6f * (float)(i / 251 + 1),
                        .material = i % 7, .body = i % 13};
}

int main(void) {
  compact_kinds t = {0};
  uint32_t idx = 0;
  /* 1. the first 20,000 in order: dense indices */
  int bad = 0;
  for (int i = 0; i < 20000; ++i) {
    const compact_kind k = kind_of(i);
    bad += compact_kinds_index(&t, &k, &idx) != DR_OK || idx != (uint32_t)i;
  }
  CHECK(bad == 0 && t.n == 20000, "dense indices: %d wrong, %zu kinds", bad, t.n);
  /* 2. met again, in another order and in runs (the cache of the last one): the same indices */
  bad = 0;
  for (int j = 0; j < 40000; ++j) {
    const int i = (int)((unsigned)(j / 3) * 7919u % 20000u);
    const compact_kind k = kind_of(i);
    bad += compact_kinds_index(&t, &k, &idx) != DR_OK || idx != (uint32_t)i;
  }
  CHECK(bad == 0 && t.n == 20000, "indices met again: %d wrong, %zu kinds", bad, t.n);
  /* 3. bits decide: -0 is not 0, a material apart is another kind */
  compact_kind a = {.mass = 0.0f, .vol0 = 1.0f, .material = 0, .body = 0}, b = a, c = a;
  b.mass = -0.0f;
  c.material = 1;
  uint32_t ia = 0, ib = 0, ic = 0;
  CHECK(compact_kinds_index(&t, &a, &ia) == DR_OK && compact_kinds_index(&t, &b, &ib) == DR_OK &&
            compact_kinds_index(&t, &c, &ic) == DR_OK,
        "three kinds");
  CHECK(ia == 20000 && ib == 20001 && ic == 20002, "-0 or another material taken for the same kind: %u %u %u", ia, ib,
        ic);
  /* 4. up to the record's 16 bits, then refused */
  for (int i = 20000; t.n < COMPACT_KINDS_MAX; ++i) {
    const compact_kind k = kind_of(i);
    if (compact_kinds_index(&t, &k, &idx) != DR_OK) break;
  }
  CHECK(t.n == COMPACT_KINDS_MAX, "%zu kinds before the limit", t.n);
  const compact_kind over = {.mass = 5.0f, .vol0 = 5.0f, .material = 3, .body = 99};
  dr_clear();
  const int rc = compact_kinds_index(&t, &over, &idx);
  CHECK(rc == DR_EINPUT, "kind 65,537: status %d, want %d", rc, DR_EINPUT);
  CHECK(strstr(dr_message(), "65536") && strstr(dr_message(), "\"storage\": \"float\""), "the message: %s",
        dr_message());
  printf("refused: %s\n", dr_message());
  CHECK(t.n == COMPACT_KINDS_MAX, "the refusal changed the table: %zu kinds", t.n);
  const compact_kind k7 = kind_of(7);
  CHECK(compact_kinds_index(&t, &k7, &idx) == DR_OK && idx == 7, "kind 7 after the refusal: %u", idx);
  compact_kinds_free(&t);
  return check_summary("test_compact_kinds");
}
