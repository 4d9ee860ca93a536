/* The RPC library: a server on a libuv loop in this thread, a blocking client in another.
 * Unary calls, status mapping, size limits, bad payloads, streaming, client cancellation,
 * cancelling a blocked stream from another thread, deadlines, and a graceful shutdown that
 * finishes an in-flight call. */
#include <pthread.h>

#include <uv.h>

#include "colo/v1/cluster.pb-c.h"
#include "common/error.h"
#include "common/log.h"
#include "proto/rpc.h"
#include "test.h"

typedef struct {
  uv_loop_t loop;
  colo_rpc_server_t *srv;
  uv_async_t stop;
  uv_timer_t later;
  colo_rpc_call_t *held; /* a call the handler answers later */
  colo_rpc_call_t *stream;
  int stream_cancelled;
  int closed;
  char target[64];
  void (*client)(void *);
  int client_rc;
  uint64_t shutdown_after_ms; /* >0: begin shutdown this long after the held call arrives */
} fx_t;

static fx_t FX;

static void reply_job(colo_rpc_call_t *call, uint64_t id) {
  Colo__V1__Job job = COLO__V1__JOB__INIT;
  job.has_id = 1;
  job.id = id;
  job.name = "echo";
  Colo__V1__GetJobResponse r = COLO__V1__GET_JOB_RESPONSE__INIT;
  r.job = &job;
  colo_rpc_reply(call, &r.base);
}

static void on_closed(colo_rpc_server_t *srv, void *data) {
  (void)srv;
  fx_t *f = data;
  f->closed = 1;
  uv_close((uv_handle_t *)&f->stop, NULL);
  uv_close((uv_handle_t *)&f->later, NULL);
}

static void answer_held(uv_timer_t *t) {
  fx_t *f = t->data;
  if (f->held) {
    reply_job(f->held, 4242);
    f->held = NULL;
  }
}

/* GetJob: id 1..999 echo; 404 NOT_FOUND; 500 is held and answered 300 ms later */
static void h_get(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  fx_t *f = data;
  const Colo__V1__GetJobRequest *req = (const void *)m;
  if (req->id == 404) {
    colo_rpc_fail(call, GRPC_STATUS_NOT_FOUND, "job %llu not found", (unsigned long long)req->id);
  } else if (req->id == 500) {
    f->held = call;
    uv_timer_start(&f->later, answer_held, 300, 0);
    if (f->shutdown_after_ms)
      colo_rpc_server_shutdown(f->srv, 5000, on_closed, f);
  } else {
    reply_job(call, req->id);
  }
}

static void stream_cancelled(colo_rpc_call_t *call, void *data) {
  fx_t *f = data;
  f->stream_cancelled = 1;
  colo_rpc_stream_end(call, GRPC_STATUS_CANCELLED, "gone");
  f->stream = NULL;
}

/* WatchJob: id=N sends N events then ends OK; id=0 keeps the stream open until cancelled */
static void h_watch(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  fx_t *f = data;
  const Colo__V1__WatchJobRequest *req = (const void *)m;
  for (uint64_t i = 0; i < req->id; i++) {
    Colo__V1__JobEvent ev = COLO__V1__JOB_EVENT__INIT;
    ev.has_seq = 1;
    ev.seq = i + 1;
    ASSERT_EQ_INT(colo_rpc_stream_send(call, &ev.base), 0);
  }
  if (req->id > 0) {
    colo_rpc_stream_end(call, GRPC_STATUS_OK, NULL);
    return;
  }
  Colo__V1__JobEvent ev = COLO__V1__JOB_EVENT__INIT;
  ev.has_seq = 1;
  ev.seq = 1;
  colo_rpc_stream_send(call, &ev.base);
  f->stream = call;
  colo_rpc_call_on_cancel(call, stream_cancelled, f);
}

static const colo_rpc_method_t METHODS[] = {
    {"/colo.v1.Cluster/GetJob", &colo__v1__get_job_request__descriptor, 0, h_get},
    {"/colo.v1.Cluster/WatchJob", &colo__v1__watch_job_request__descriptor, 1, h_watch},
};

static void on_stop(uv_async_t *a) {
  fx_t *f = a->data;
  if (f->stream) {
    colo_rpc_stream_end(f->stream, GRPC_STATUS_UNAVAILABLE, "stopping");
    f->stream = NULL;
  }
  colo_rpc_server_shutdown(f->srv, 2000, on_closed, f);
}

static void client_main(void *arg) {
  fx_t *f = arg;
  f->client(f);
  uv_async_send(&f->stop);
}

/* Runs `client` in a thread against a fresh server; returns when the server has closed. */
static void run_fixture(void (*client)(void *)) {
  fx_t *f = &FX;
  memset(f, 0, sizeof *f);
  colo_log_set_level(COLO_LOG_ERROR);
  ASSERT_EQ_INT(uv_loop_init(&f->loop), 0);
  colo_rpc_server_opts_t o = {0};
  o.listen = "127.0.0.1:0";
  o.max_message_bytes = 1024;
  char err[256];
  if (colo_rpc_server_start(&f->loop, &o, METHODS, 2, f, &f->srv, err, sizeof err) < 0)
    FAIL_AT("server: %s", err);
  snprintf(f->target, sizeof f->target, "127.0.0.1:%d", colo_rpc_server_port(f->srv));
  uv_async_init(&f->loop, &f->stop, on_stop);
  f->stop.data = f;
  uv_timer_init(&f->loop, &f->later);
  f->later.data = f;
  f->client = client;
  uv_thread_t th;
  uv_thread_create(&th, client_main, f);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  uv_thread_join(&th);
  ASSERT_EQ_INT(f->closed, 1);
  ASSERT_EQ_INT(uv_loop_close(&f->loop), 0);
}

static colo_rpc_client_t *connect_client(fx_t *f) {
  colo_rpc_client_t *c;
  char err[256];
  if (colo_rpc_client_open(f->target, NULL, &c, err, sizeof err) < 0)
    FAIL_AT("client: %s", err);
  return c;
}

static int get(colo_rpc_client_t *c, uint64_t id, uint64_t timeout, uint64_t *got,
               colo_rpc_status_t *st) {
  Colo__V1__GetJobRequest req = COLO__V1__GET_JOB_REQUEST__INIT;
  req.has_id = 1;
  req.id = id;
  Colo__V1__GetJobResponse *resp = NULL;
  int rc = colo_rpc_call(c, "/colo.v1.Cluster/GetJob", &req.base,
                         &colo__v1__get_job_response__descriptor, timeout,
                         (ProtobufCMessage **)&resp, st);
  if (rc == 0) {
    *got = resp->job->id;
    colo__v1__get_job_response__free_unpacked(resp, NULL);
  }
  return rc;
}

static void c_unary(void *arg) {
  colo_rpc_client_t *c = connect_client(arg);
  colo_rpc_status_t st;
  uint64_t got = 0;
  for (uint64_t i = 1; i <= 200; i++) {
    ASSERT_EQ_INT(get(c, i, 5000, &got, &st), 0);
    ASSERT_EQ_INT(got, i);
  }
  ASSERT_EQ_INT(get(c, 404, 5000, &got, &st), COLO_ENOENT);
  ASSERT_EQ_INT(st.code, GRPC_STATUS_NOT_FOUND);
  ASSERT_EQ_STR(st.message, "job 404 not found");
  /* a method the server does not have */
  Colo__V1__GetJobRequest req = COLO__V1__GET_JOB_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  ASSERT_EQ_INT(colo_rpc_call(c, "/colo.v1.Cluster/Nope", &req.base,
                              &colo__v1__get_job_response__descriptor, 5000, &resp, &st),
                COLO_ENOSYS);
  colo_rpc_client_close(c);
}

TEST(unary_calls_and_status) {
  run_fixture(c_unary);
}

static void c_limits(void *arg) {
  colo_rpc_client_t *c = connect_client(arg);
  colo_rpc_status_t st;
  /* a request over max_message_bytes (1024) */
  Colo__V1__SubmitJobRequest big = COLO__V1__SUBMIT_JOB_REQUEST__INIT;
  char token[4000];
  memset(token, 'x', sizeof token - 1);
  token[sizeof token - 1] = '\0';
  big.client_token = token;
  ProtobufCMessage *resp = NULL;
  int rc = colo_rpc_call(c, "/colo.v1.Cluster/GetJob", &big.base,
                         &colo__v1__get_job_response__descriptor, 5000, &resp, &st);
  ASSERT_EQ_INT(rc, COLO_ETOOBIG);
  ASSERT_EQ_INT(st.code, GRPC_STATUS_RESOURCE_EXHAUSTED);
  /* bytes that are not a GetJobRequest: field 1 sent length-delimited instead of varint */
  Colo__V1__SubmitJobRequest wrong = COLO__V1__SUBMIT_JOB_REQUEST__INIT;
  Colo__V1__JobSpec spec = COLO__V1__JOB_SPEC__INIT;
  spec.name = "x";
  wrong.spec = &spec;
  rc = colo_rpc_call(c, "/colo.v1.Cluster/GetJob", &wrong.base,
                     &colo__v1__get_job_response__descriptor, 5000, &resp, &st);
  ASSERT_EQ_INT(rc, COLO_EINVAL);
  ASSERT_EQ_STR(st.message, "request is not a valid colo.v1.GetJobRequest message");
  /* the server is still fine */
  uint64_t got;
  ASSERT_EQ_INT(get(c, 7, 5000, &got, &st), 0);
  ASSERT_EQ_INT(got, 7);
  colo_rpc_client_close(c);
}

TEST(size_limit_and_bad_payload) {
  run_fixture(c_limits);
}

static int count_cb(const ProtobufCMessage *m, void *data) {
  const Colo__V1__JobEvent *ev = (const void *)m;
  int *n = data;
  (*n)++;
  ASSERT_EQ_INT(ev->seq, (uint64_t)*n); /* in order */
  return 0;
}

static int stop_after_first(const ProtobufCMessage *m, void *data) {
  (void)m;
  (*(int *)data)++;
  return 1;
}

static void c_stream(void *arg) {
  fx_t *f = arg;
  colo_rpc_client_t *c = connect_client(f);
  colo_rpc_status_t st;
  Colo__V1__WatchJobRequest req = COLO__V1__WATCH_JOB_REQUEST__INIT;
  req.has_id = 1;
  req.id = 500;
  int n = 0;
  ASSERT_EQ_INT(colo_rpc_call_stream(c, "/colo.v1.Cluster/WatchJob", &req.base,
                                     &colo__v1__job_event__descriptor, 10000, count_cb, &n, &st),
                0);
  ASSERT_EQ_INT(n, 500);
  /* an open-ended stream that the client abandons: the server learns of it */
  req.id = 0;
  n = 0;
  ASSERT_EQ_INT(colo_rpc_call_stream(c, "/colo.v1.Cluster/WatchJob", &req.base,
                                     &colo__v1__job_event__descriptor, 10000, stop_after_first, &n,
                                     &st),
                0);
  ASSERT_EQ_INT(n, 1);
  colo_rpc_client_close(c);
  for (int i = 0; i < 200 && !f->stream_cancelled; i++)
    usleep(10000);
  ASSERT_EQ_INT(f->stream_cancelled, 1);
}

TEST(streaming_and_client_cancel) {
  run_fixture(c_stream);
}

typedef struct {
  colo_rpc_client_t *c;
  int rc, n;
  colo_rpc_status_t st;
} blocked_t;

static void *blocked_stream(void *arg) {
  blocked_t *b = arg;
  Colo__V1__WatchJobRequest req = COLO__V1__WATCH_JOB_REQUEST__INIT;
  req.has_id = 1;
  req.id = 0; /* open-ended: one event, then nothing until cancelled */
  b->rc = colo_rpc_call_stream(b->c, "/colo.v1.Cluster/WatchJob", &req.base,
                               &colo__v1__job_event__descriptor, 0, count_cb, &b->n, &b->st);
  return NULL;
}

/* a thread blocked in a stream without a deadline is stopped from another thread */
static void c_cancel(void *arg) {
  fx_t *f = arg;
  blocked_t b = {connect_client(f), 1, 0, {0}};
  pthread_t t;
  ASSERT_EQ_INT(pthread_create(&t, NULL, blocked_stream, &b), 0);
  for (int i = 0; i < 500 && !f->stream; i++)
    usleep(10000);
  ASSERT(f->stream != NULL);
  usleep(100000); /* blocked in the stream, past its first event */
  uint64_t t0 = uv_hrtime();
  colo_rpc_client_cancel(b.c);
  pthread_join(t, NULL);
  ASSERT(uv_hrtime() - t0 < 2000000000ull);
  ASSERT_EQ_INT(b.rc, COLO_ECANCELED);
  ASSERT_EQ_INT(b.st.code, GRPC_STATUS_CANCELLED);
  ASSERT_EQ_INT(b.n, 1);
  /* later calls are cancelled at once */
  uint64_t got;
  ASSERT_EQ_INT(get(b.c, 9, 5000, &got, &b.st), COLO_ECANCELED);
  colo_rpc_client_close(b.c);
  for (int i = 0; i < 200 && !f->stream_cancelled; i++)
    usleep(10000);
  ASSERT_EQ_INT(f->stream_cancelled, 1);
}

TEST(cancel_from_another_thread) {
  run_fixture(c_cancel);
}

static void c_deadline(void *arg) {
  colo_rpc_client_t *c = connect_client(arg);
  colo_rpc_status_t st;
  uint64_t got;
  /* the server holds id 500 for 300 ms: a 50 ms deadline expires first */
  ASSERT_EQ_INT(get(c, 500, 50, &got, &st), COLO_ETIMEDOUT);
  ASSERT_EQ_INT(st.code, GRPC_STATUS_DEADLINE_EXCEEDED);
  usleep(400000); /* let the held reply go out to a call that is already over */
  ASSERT_EQ_INT(get(c, 9, 5000, &got, &st), 0);
  colo_rpc_client_close(c);
}

TEST(deadline_exceeded) {
  run_fixture(c_deadline);
}

static void c_drain(void *arg) {
  fx_t *f = arg;
  f->shutdown_after_ms = 1;
  colo_rpc_client_t *c = connect_client(f);
  colo_rpc_status_t st;
  uint64_t got = 0;
  /* shutdown begins while this call is held; it still completes */
  ASSERT_EQ_INT(get(c, 500, 5000, &got, &st), 0);
  ASSERT_EQ_INT(got, 4242);
  /* and afterwards nothing is accepted */
  ASSERT(get(c, 1, 2000, &got, &st) < 0);
  colo_rpc_client_close(c);
}

static void on_stop_noop(uv_async_t *a) {
  (void)a;
}

TEST(graceful_shutdown_finishes_in_flight) {
  fx_t *f = &FX;
  (void)f;
  /* the held call starts the shutdown itself; the stop async must then do nothing */
  memset(&FX, 0, sizeof FX);
  colo_log_set_level(COLO_LOG_ERROR);
  ASSERT_EQ_INT(uv_loop_init(&FX.loop), 0);
  colo_rpc_server_opts_t o = {0};
  o.listen = "127.0.0.1:0";
  char err[256];
  ASSERT_EQ_INT(colo_rpc_server_start(&FX.loop, &o, METHODS, 2, &FX, &FX.srv, err, sizeof err), 0);
  snprintf(FX.target, sizeof FX.target, "127.0.0.1:%d", colo_rpc_server_port(FX.srv));
  uv_async_init(&FX.loop, &FX.stop, on_stop_noop);
  uv_timer_init(&FX.loop, &FX.later);
  FX.later.data = &FX;
  FX.client = c_drain;
  uv_thread_t th;
  uv_thread_create(&th, client_main, &FX);
  uv_run(&FX.loop, UV_RUN_DEFAULT);
  uv_thread_join(&th);
  ASSERT_EQ_INT(FX.closed, 1);
  ASSERT_EQ_INT(uv_loop_close(&FX.loop), 0);
}

TEST(status_mapping_round_trips) {
  int errs[] = {0,
                COLO_EINVAL,
                COLO_ENOENT,
                COLO_EEXIST,
                COLO_ESTATE,
                COLO_ETIMEDOUT,
                COLO_EUNAVAIL,
                COLO_ECANCELED,
                COLO_ETOOBIG,
                COLO_ENOSYS,
                COLO_EBUSY};
  for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
    ASSERT_EQ_INT(colo_rpc_status_to_err(colo_rpc_err_to_status(errs[i])), errs[i]);
  ASSERT_EQ_INT(colo_rpc_err_to_status(COLO_EDB), GRPC_STATUS_INTERNAL);
  ASSERT_EQ_STR(colo_rpc_status_name(GRPC_STATUS_FAILED_PRECONDITION), "FAILED_PRECONDITION");
}

TEST(listen_failure_is_reported) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  colo_rpc_server_opts_t o = {0};
  o.listen = "256.1.1.1:1";
  colo_rpc_server_t *srv = NULL;
  char err[256];
  colo_log_set_level(COLO_LOG_ERROR);
  ASSERT_EQ_INT(colo_rpc_server_start(&loop, &o, METHODS, 2, NULL, &srv, err, sizeof err),
                COLO_EIO);
  ASSERT(srv == NULL);
  ASSERT_EQ_STR(err, "cannot listen on 256.1.1.1:1 (address in use or invalid)");
  uv_loop_close(&loop);
}

TEST_MAIN()
