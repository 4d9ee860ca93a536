/* Job notifications (notify.h). */
#include "notify.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "colod.h"
#include "../common/jobspec.h"

#define NOTIFY_IN_FLIGHT  64
#define NOTIFY_TIMEOUT_MS 5000 /* the whole POST; a drain waits for it at most this long */

typedef struct {
  uv_work_t req;
  colod_t *d;
  uint64_t job;
  char url[1024];
  char *body;
  long status; /* the HTTP status; 0: no answer */
  char err[CURL_ERROR_SIZE];
} notify_t;

int colod_notify_init(void) {
  return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

void colod_notify_cleanup(void) {
  curl_global_cleanup();
}

static size_t discard(char *p, size_t size, size_t n, void *data) {
  (void)p;
  (void)data;
  return size * n;
}

static void post(uv_work_t *req) {
  notify_t *w = req->data;
  CURL *c = curl_easy_init();
  struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
  if (!c || !headers) {
    snprintf(w->err, sizeof w->err, "out of memory");
  } else {
    curl_easy_setopt(c, CURLOPT_URL, w->url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, w->body);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)NOTIFY_TIMEOUT_MS);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, w->err);
    if (curl_easy_perform(c) == CURLE_OK)
      curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &w->status);
    else if (!w->err[0])
      snprintf(w->err, sizeof w->err, "no answer");
  }
  curl_slist_free_all(headers);
  if (c)
    curl_easy_cleanup(c);
}

static void posted(uv_work_t *req, int status) {
  notify_t *w = req->data;
  colod_t *d = w->d;
  d->notify_in_flight--;
  if (status == 0 && w->status >= 200 && w->status < 300) {
    d->stats.notify_sent++;
  } else {
    d->stats.notify_failed++;
    if (w->status)
      colo_log(COLO_LOG_WARN, "notify", "job %llu: %s answered HTTP %ld",
               (unsigned long long)w->job, w->url, w->status);
    else
      colo_log(COLO_LOG_WARN, "notify", "job %llu: cannot post to %s: %s",
               (unsigned long long)w->job, w->url, status ? "cancelled" : w->err);
  }
  free(w->body);
  free(w);
}

/* The events a state change is (bits by Colo__V1__NotifyEvent): an attempt's start, a restart
 * to come, an end, and of ends the failed ones. */
#define EV(e) (1u << COLO__V1__NOTIFY_EVENT__NOTIFY_EVENT_##e)
static unsigned events_of(int state) {
  if (state == COLO_JOB_RUNNING)
    return EV(STARTED);
  if (state == COLO_JOB_RESTARTING)
    return EV(RESTARTING);
  if (!colo_job_state_terminal(state))
    return 0;
  return EV(ENDED) | (state == COLO_JOB_FAILED || state == COLO_JOB_TIMED_OUT ? EV(FAILED) : 0);
}
/* what the operator's notify_url is told, and a job's notify.url when its notify.on is empty */
static const unsigned TOLD_BY_DEFAULT = EV(ENDED) | EV(RESTARTING);

static void enqueue(colod_t *d, uint64_t job, const char *url, const char *body) {
  if (d->notify_in_flight >= NOTIFY_IN_FLIGHT) {
    d->stats.notify_dropped++;
    colo_log(COLO_LOG_WARN, "notify", "job %llu: not posted to %s, %d posts still in flight",
             (unsigned long long)job, url, NOTIFY_IN_FLIGHT);
    return;
  }
  notify_t *w = calloc(1, sizeof *w);
  if (!w || !(w->body = strdup(body))) {
    free(w);
    d->stats.notify_dropped++;
    return;
  }
  w->req.data = w;
  w->d = d;
  w->job = job;
  snprintf(w->url, sizeof w->url, "%s", url);
  if (uv_queue_work(d->loop, &w->req, post, posted) != 0) {
    free(w->body);
    free(w);
    d->stats.notify_dropped++;
    return;
  }
  d->notify_in_flight++;
}

static char *record(const colo_job_t *job, const char *account) {
  char text[1024];
  snprintf(text, sizeof text, "colo job %llu \"%s\" %s%s%s", (unsigned long long)job->id, job->name,
           colo_job_state_name(job->state), job->message[0] ? ": " : "", job->message);
  cJSON *o = cJSON_CreateObject();
  char *body = NULL;
  if (o && cJSON_AddStringToObject(o, "text", text) &&
      cJSON_AddNumberToObject(o, "job", (double)job->id) &&
      cJSON_AddStringToObject(o, "name", job->name) &&
      cJSON_AddStringToObject(o, "owner", job->owner) &&
      cJSON_AddStringToObject(o, "account", account) &&
      cJSON_AddStringToObject(o, "state", colo_job_state_name(job->state)) &&
      cJSON_AddStringToObject(o, "message", job->message) &&
      cJSON_AddNumberToObject(o, "attempt", job->attempt) &&
      cJSON_AddNumberToObject(o, "restarts", job->restarts) &&
      cJSON_AddNumberToObject(o, "time_ms", (double)job->updated_ms))
    body = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return body;
}

void colod_notify_job(colod_t *d, const colo_job_t *job) {
  unsigned ev = events_of(job->state);
  if (!ev)
    return;
  Colo__V1__JobSpec *spec = colo__v1__job_spec__unpack(NULL, job->spec_len, job->spec);
  const Colo__V1__NotifySpec *n = spec ? spec->notify : NULL;
  const char *url = n && n->url && n->url[0] ? n->url : NULL;
  unsigned want = 0;
  for (size_t i = 0; url && i < n->n_on; i++)
    if (n->on[i] > 0 && n->on[i] < 32) /* checked at submit; a stored spec is trusted no further */
      want |= 1u << n->on[i];
  if (url && !n->n_on)
    want = TOLD_BY_DEFAULT;
  int to_operator = d->cfg.notify_url[0] && (ev & TOLD_BY_DEFAULT);
  int to_job = url && (ev & want);
  if (to_job && !colo_url_allowed(url, d->cfg.notify_allow)) { /* notify_allow changed since */
    d->stats.notify_dropped++;
    colo_log(COLO_LOG_WARN, "notify", "job %llu: %s is no longer in notify_allow: not posted",
             (unsigned long long)job->id, url);
    to_job = 0;
  }
  char *body =
      to_operator || to_job ? record(job, spec && spec->account ? spec->account : "") : NULL;
  if ((to_operator || to_job) && !body)
    d->stats.notify_dropped += (uint64_t)(to_operator + to_job);
  if (body && to_operator)
    enqueue(d, job->id, d->cfg.notify_url, body);
  if (body && to_job)
    enqueue(d, job->id, url, body);
  cJSON_free(body);
  if (spec)
    colo__v1__job_spec__free_unpacked(spec, NULL);
}
