/* Several pthreads write to one leveldb_t at once (puts and batches)
   while another reads; afterwards every write is there, and survives a
   reopen. Usage: threads_test <scratch directory> */

#define _POSIX_C_SOURCE 200809L
#include <leveldb/c.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { WRITERS = 4, KEYS_PER_WRITER = 3000, BATCH = 10 };

static leveldb_t* db;
static volatile int writers_done = 0;

static void* writer(void* arg) {
  int id = (int)(long)arg;
  leveldb_writeoptions_t* wo = leveldb_writeoptions_create();
  char key[32], val[64];
  char* err = NULL;
  /* Half as single puts, half as batches of BATCH puts. */
  for (int i = 0; i < KEYS_PER_WRITER / 2; i++) {
    snprintf(key, sizeof(key), "w%d-%06d", id, i);
    snprintf(val, sizeof(val), "value-%d-%d", id, i);
    leveldb_put(db, wo, key, strlen(key), val, strlen(val), &err);
    CHECK_NO_ERROR(err);
  }
  leveldb_writebatch_t* wb = leveldb_writebatch_create();
  for (int i = KEYS_PER_WRITER / 2; i < KEYS_PER_WRITER; i++) {
    snprintf(key, sizeof(key), "w%d-%06d", id, i);
    snprintf(val, sizeof(val), "value-%d-%d", id, i);
    leveldb_writebatch_put(wb, key, strlen(key), val, strlen(val));
    if ((i + 1) % BATCH == 0) {
      /* Every few batches synced. */
      leveldb_writeoptions_set_sync(wo, (i / BATCH) % 7 == 0);
      leveldb_write(db, wo, wb, &err);
      CHECK_NO_ERROR(err);
      leveldb_writebatch_clear(wb);
    }
  }
  leveldb_writebatch_destroy(wb);
  leveldb_writeoptions_destroy(wo);
  return NULL;
}

/* Reads while the writers write: a key once seen keeps its value, and an
   iterator's keys are in order. */
static void* reader(void* arg) {
  (void)arg;
  leveldb_readoptions_t* ro = leveldb_readoptions_create();
  char* err = NULL;
  int rounds = 0;
  while (!__atomic_load_n(&writers_done, __ATOMIC_ACQUIRE) || rounds < 3) {
    size_t len;
    char* v = leveldb_get(db, ro, "w0-000000", 9, &len, &err);
    CHECK_NO_ERROR(err);
    if (v != NULL) CHECK(same(v, len, "value-0-0"));
    leveldb_free(v);
    leveldb_iterator_t* it = leveldb_create_iterator(db, ro);
    char last[32] = "";
    size_t last_len = 0;
    int n = 0;
    for (leveldb_iter_seek_to_first(it); leveldb_iter_valid(it) && n < 2000;
         leveldb_iter_next(it), n++) {
      size_t klen;
      const char* k = leveldb_iter_key(it, &klen);
      CHECK(klen < sizeof(last));
      size_t m = klen < last_len ? klen : last_len;
      int c = memcmp(last, k, m);
      CHECK(c < 0 || (c == 0 && last_len < klen));
      memcpy(last, k, klen);
      last_len = klen;
    }
    leveldb_iter_get_error(it, &err);
    CHECK_NO_ERROR(err);
    leveldb_iter_destroy(it);
    rounds++;
  }
  leveldb_readoptions_destroy(ro);
  return NULL;
}

static void check_all(leveldb_t* d) {
  leveldb_readoptions_t* ro = leveldb_readoptions_create();
  char key[32], val[64];
  char* err = NULL;
  for (int id = 0; id < WRITERS; id++) {
    for (int i = 0; i < KEYS_PER_WRITER; i++) {
      snprintf(key, sizeof(key), "w%d-%06d", id, i);
      snprintf(val, sizeof(val), "value-%d-%d", id, i);
      size_t len;
      char* v = leveldb_get(d, ro, key, strlen(key), &len, &err);
      CHECK_NO_ERROR(err);
      CHECK(same(v, len, val));
      leveldb_free(v);
    }
  }
  leveldb_iterator_t* it = leveldb_create_iterator(d, ro);
  int n = 0;
  for (leveldb_iter_seek_to_first(it); leveldb_iter_valid(it);
       leveldb_iter_next(it))
    n++;
  CHECK(n == WRITERS * KEYS_PER_WRITER);
  leveldb_iter_destroy(it);
  leveldb_readoptions_destroy(ro);
}

int main(int argc, char** argv) {
  CHECK(argc == 2);
  char path[4096];
  snprintf(path, sizeof(path), "%s/threads_db", argv[1]);
  char* err = NULL;
  leveldb_options_t* options = leveldb_options_create();
  leveldb_options_set_create_if_missing(options, 1);
  leveldb_options_set_write_buffer_size(options, 256 << 10);
  db = leveldb_open(options, path, &err);
  CHECK_NO_ERROR(err);

  pthread_t threads[WRITERS + 1];
  for (long i = 0; i < WRITERS; i++)
    CHECK(pthread_create(&threads[i], NULL, writer, (void*)i) == 0);
  CHECK(pthread_create(&threads[WRITERS], NULL, reader, NULL) == 0);
  for (int i = 0; i < WRITERS; i++) CHECK(pthread_join(threads[i], NULL) == 0);
  __atomic_store_n(&writers_done, 1, __ATOMIC_RELEASE);
  CHECK(pthread_join(threads[WRITERS], NULL) == 0);

  check_all(db);
  leveldb_close(db);
  db = leveldb_open(options, path, &err);
  CHECK_NO_ERROR(err);
  check_all(db);
  leveldb_close(db);
  leveldb_destroy_db(options, path, &err);
  CHECK_NO_ERROR(err);
  leveldb_options_destroy(options);
  printf("threads_test: ok\n");
  return 0;
}
