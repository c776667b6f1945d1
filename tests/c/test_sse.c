/* Unit tests for src/sse/sse.c: the event-stream grammar (line endings, comments, fields,
 * multi-line data, the default type, the BOM), every split of a stream giving the same events
 * as the whole, the size bound, and a callback that stops the feed. */
#include "sse/sse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* Events rendered as "type|data;" so a whole stream compares as one string. */
typedef struct {
  char out[4096];
  size_t len;
  int stop_after; /* return 7 after this many events (0: never) */
  int seen;
} sink;

static int on_event(void *ud, const char *type, size_t tl, const char *data, size_t dl) {
  sink *s = ud;
  int n = snprintf(s->out + s->len, sizeof s->out - s->len, "%.*s|%.*s;", (int)tl, type,
                   (int)dl, data);
  if (n > 0)
    s->len += (size_t)n;
  s->seen++;
  return s->stop_after && s->seen == s->stop_after ? 7 : 0;
}

static const char *parse_whole(const char *in, sink *s) {
  sb_sse p;
  sb_sse_init(&p, 1 << 16);
  memset(s, 0, sizeof *s);
  int rc = sb_sse_feed(&p, in, strlen(in), on_event, s);
  CHECK(rc == SB_SSE_OK, "feed returned %d", rc);
  sb_sse_free(&p);
  return s->out;
}

static void expect(const char *in, const char *want) {
  sink s;
  const char *got = parse_whole(in, &s);
  CHECK(strcmp(got, want) == 0, "input %s\n  want %s\n  got  %s", in, want, got);
}

static void test_grammar(void) {
  expect("event: ping\ndata: {}\n\n", "ping|{};");
  expect("data: a\n\n", "message|a;");                          /* default type */
  expect("data: a\ndata: b\n\n", "message|a\nb;");              /* joined with LF */
  expect("data:no-space\n\n", "message|no-space;");             /* the space is optional */
  expect("data:  two\n\n", "message| two;");                    /* only one space goes */
  expect("data\n\n", "message|;");                              /* no colon: empty value */
  expect(": keep-alive\n\ndata: x\n\n", "message|x;");          /* comments */
  expect("event: a\n\n", "");                                   /* no data: nothing */
  expect("event: a\n\ndata: b\n\n", "message|b;");              /* ...and the type is reset */
  expect("id: 1\nretry: 10\nfoo: bar\ndata: x\n\n", "message|x;");
  expect("event: a\r\ndata: 1\r\n\r\n", "a|1;");                /* CRLF */
  expect("event: a\rdata: 1\r\r", "a|1;");                      /* CR */
  expect("\xEF\xBB\xBF" "data: bom\n\n", "message|bom;");       /* a BOM is dropped */
  expect("data: \xEF\xBB\xBF" "x\n\n", "message|\xEF\xBB\xBF" "x;"); /* ...only at the start */
  expect("data: open", "");                                      /* unfinished: not dispatched */
  expect("data: a\n\ndata: b\n", "message|a;");
  expect("event: x\nevent: y\ndata: 1\n\n", "y|1;");
  expect("data: a:b: c\n\n", "message|a:b: c;");
}

/* Every way of cutting a stream in two, and byte by byte, gives the events of the whole. */
static void test_splits(void) {
  const char *in = "\xEF\xBB\xBF" "event: message_start\r\ndata: {\"a\":1}\r\n\r\n: c\r\n"
                   "event: content_block_delta\ndata: {\"partial_json\":\"{\\\"x\"}\n\n"
                   "data: l1\rdata: l2\r\r";
  sink whole;
  char want[4096];
  snprintf(want, sizeof want, "%s", parse_whole(in, &whole));
  CHECK(whole.seen == 3, "three events, got %d", whole.seen);
  size_t n = strlen(in);
  for (size_t cut = 0; cut <= n; cut++) {
    sb_sse p;
    sb_sse_init(&p, 1 << 16);
    sink s = {0};
    CHECK(sb_sse_feed(&p, in, cut, on_event, &s) == SB_SSE_OK, "first part");
    CHECK(sb_sse_feed(&p, in + cut, n - cut, on_event, &s) == SB_SSE_OK, "second part");
    CHECK(strcmp(s.out, want) == 0, "cut at %zu: got %s", cut, s.out);
    sb_sse_free(&p);
  }
  sb_sse p;
  sb_sse_init(&p, 1 << 16);
  sink s = {0};
  for (size_t i = 0; i < n; i++)
    sb_sse_feed(&p, in + i, 1, on_event, &s);
  CHECK(strcmp(s.out, want) == 0, "byte by byte: got %s", s.out);
  CHECK(sb_sse_buffered(&p) == 0, "nothing held between events, %zu", sb_sse_buffered(&p));
  sb_sse_free(&p);
}

static void test_bound(void) {
  sb_sse p;
  sb_sse_init(&p, 16);
  sink s = {0};
  CHECK(sb_sse_feed(&p, "data: 0123456789\n\n", 18, on_event, &s) == SB_SSE_OK, "fits");
  CHECK(sb_sse_feed(&p, "data: 0123456789abcdef\n\n", 24, on_event, &s) == SB_SSE_TOO_LARGE,
        "a data line past the bound");
  CHECK(sb_sse_feed(&p, "data: x\n\n", 9, on_event, &s) == SB_SSE_TOO_LARGE, "sticky");
  sb_sse_free(&p);

  sb_sse_init(&p, 16);
  memset(&s, 0, sizeof s);
  int rc = SB_SSE_OK;
  for (int i = 0; i < 40 && rc == SB_SSE_OK; i++) /* a line that never ends */
    rc = sb_sse_feed(&p, "x", 1, on_event, &s);
  CHECK(rc == SB_SSE_TOO_LARGE, "an endless line is refused, rc %d", rc);
  CHECK(sb_sse_buffered(&p) <= 16, "held %zu", sb_sse_buffered(&p));
  sb_sse_free(&p);

  sb_sse_init(&p, 16); /* many data lines of one event add up */
  memset(&s, 0, sizeof s);
  rc = SB_SSE_OK;
  for (int i = 0; i < 20 && rc == SB_SSE_OK; i++)
    rc = sb_sse_feed(&p, "data: ab\n", 9, on_event, &s);
  CHECK(rc == SB_SSE_TOO_LARGE, "an event of many lines is bounded, rc %d", rc);
  sb_sse_free(&p);
}

static void test_stop(void) {
  sb_sse p;
  sb_sse_init(&p, 1024);
  sink s = {0};
  s.stop_after = 1;
  int rc = sb_sse_feed(&p, "data: 1\n\ndata: 2\n\n", 18, on_event, &s);
  CHECK(rc == 7, "the callback's value comes back, got %d", rc);
  CHECK(s.seen == 1, "no event after the stop, saw %d", s.seen);
  sb_sse_free(&p);
}

int main(void) {
  test_grammar();
  test_splits();
  test_bound();
  test_stop();
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("sse: all checks passed\n");
  return 0;
}
