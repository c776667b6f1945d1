/* The process-wide libcurl multi handle, driven by the engine's libuv loop.
 *
 * One CURLM for the process, created on first use: its connection cache and DNS cache are
 * shared by every request, so a keep-alive connection to the same peer is reused. libcurl
 * tells us which sockets to watch (CURLMOPT_SOCKETFUNCTION → one uv_poll per socket) and when
 * to wake it (CURLMOPT_TIMERFUNCTION → one uv_timer); we hand readiness back with
 * curl_multi_socket_action and collect finished transfers with curl_multi_info_read.
 *
 * A transfer is a job: the caller embeds an sb_curl_job in its own request object, fills in
 * `easy`, `done` and `dispose`, and starts it. Exactly one of `done` or `dispose` is called
 * for every started job, once, after the easy handle was removed from the multi; the callee
 * owns the easy handle and everything else of the job from then on. */
#ifndef SB_HTTP_CLIENT_MULTI_H
#define SB_HTTP_CLIENT_MULTI_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct sb_curl_job sb_curl_job;
struct sb_curl_job {
  CURL *easy; /* owned by the caller; CURLOPT_PRIVATE is set to the job by sb_curl_job_start */
  /* The transfer ended: `result` is libcurl's code, CURLE_ABORTED_BY_CALLBACK after
   * sb_curl_job_cancel. Runs from a libuv callback or from the cancelling call (never from
   * inside a libcurl callback), so it may resume Lua and start or cancel other jobs. */
  void (*done)(sb_curl_job *job, CURLcode result);
  /* The process is tearing down (the Lua state is closing): free the job, resume nothing. */
  void (*dispose)(sb_curl_job *job);
  /* private to client_multi.c */
  sb_curl_job *prev, *next;
  bool cancel_pending;
};

/* Adds the job's easy handle to the multi (creating the multi on first use). On failure
 * returns false with a reason in `err` (of `err_len` bytes), and the job was not started. */
bool sb_curl_job_start(sb_curl_job *job, char *err, size_t err_len);

/* Ends a started job now: its `done` runs before this returns, or — when called from inside
 * a libcurl callback (an on_chunk that aborts a signal) — as soon as libcurl returns to us,
 * in the same loop turn. Safe to call twice; a job whose `done` already ran must not be
 * passed. */
void sb_curl_job_cancel(sb_curl_job *job);

/* Removes and disposes every job, cleans the multi up and closes our libuv handles. Called
 * from the engine's shutdown registry, while the loop is still open. */
void sb_curl_teardown(void);

#endif
