/* Job notifications (notify.h). */
#include "notify.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "colod.h"
#include "usage.h"

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

static int told(int state) {
  return colo_job_state_terminal(state) || state == COLO_JOB_RESTARTING;
}

void colod_notify_job(colod_t *d, const colo_job_t *job) {
  if (!d->cfg.notify_url[0] || !told(job->state))
    return;
  if (d->notify_in_flight >= NOTIFY_IN_FLIGHT) {
    d->stats.notify_dropped++;
    colo_log(COLO_LOG_WARN, "notify", "job %llu %s: not posted, %d posts still in flight",
             (unsigned long long)job->id, colo_job_state_name(job->state), NOTIFY_IN_FLIGHT);
    return;
  }
  colo_usage_key_t key = {.account = "", .device = 0};
  colod_usage_key(job->spec, job->spec_len, &key);
  char text[1024];
  snprintf(text, sizeof text, "colo job %llu \"%s\" %s%s%s", (unsigned long long)job->id, job->name,
           colo_job_state_name(job->state), job->message[0] ? ": " : "", job->message);
  cJSON *o = cJSON_CreateObject();
  notify_t *w = calloc(1, sizeof *w);
  if (o && w && cJSON_AddStringToObject(o, "text", text) &&
      cJSON_AddNumberToObject(o, "job", (double)job->id) &&
      cJSON_AddStringToObject(o, "name", job->name) &&
      cJSON_AddStringToObject(o, "owner", job->owner) &&
      cJSON_AddStringToObject(o, "account", key.account) &&
      cJSON_AddStringToObject(o, "state", colo_job_state_name(job->state)) &&
      cJSON_AddStringToObject(o, "message", job->message) &&
      cJSON_AddNumberToObject(o, "attempt", job->attempt) &&
      cJSON_AddNumberToObject(o, "restarts", job->restarts) &&
      cJSON_AddNumberToObject(o, "time_ms", (double)job->updated_ms))
    w->body = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!w || !w->body) {
    free(w);
    d->stats.notify_dropped++;
    return;
  }
  w->req.data = w;
  w->d = d;
  w->job = job->id;
  snprintf(w->url, sizeof w->url, "%s", d->cfg.notify_url);
  if (uv_queue_work(d->loop, &w->req, post, posted) != 0) {
    free(w->body);
    free(w);
    d->stats.notify_dropped++;
    return;
  }
  d->notify_in_flight++;
}
