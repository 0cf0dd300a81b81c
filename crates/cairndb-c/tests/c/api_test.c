/* Every function of the LevelDB C API, as a LevelDB program calls it.
   Usage: api_test <scratch directory> */

#include <leveldb/c.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static char dbpath[4096];

static void put(leveldb_t* db, const leveldb_writeoptions_t* wo,
                const char* k, const char* v) {
  char* err = NULL;
  leveldb_put(db, wo, k, strlen(k), v, strlen(v), &err);
  CHECK_NO_ERROR(err);
}

/* Checks the value of k is `want` (NULL: absent). */
static void check_get(leveldb_t* db, const leveldb_readoptions_t* ro,
                      const char* k, const char* want) {
  char* err = NULL;
  size_t len = 12345;
  char* val = leveldb_get(db, ro, k, strlen(k), &len, &err);
  CHECK_NO_ERROR(err);
  if (want == NULL) {
    CHECK(val == NULL);
    CHECK(len == 0);
  } else {
    if (!same(val, len, want)) {
      fprintf(stderr, "get(%s): want %s, got %.*s\n", k, want, (int)len,
              val ? val : "(null)");
      exit(1);
    }
  }
  leveldb_free(val);
}

/* The iterator is on k => v (or invalid when k is NULL). */
static void check_iter(leveldb_iterator_t* it, const char* k, const char* v) {
  if (k == NULL) {
    CHECK(!leveldb_iter_valid(it));
    return;
  }
  CHECK(leveldb_iter_valid(it));
  size_t klen, vlen;
  const char* key = leveldb_iter_key(it, &klen);
  const char* val = leveldb_iter_value(it, &vlen);
  if (!same(key, klen, k) || !same(val, vlen, v)) {
    fprintf(stderr, "iter: want %s=%s, got %.*s=%.*s\n", k, v, (int)klen,
            key, (int)vlen, val);
    exit(1);
  }
}

/* Write batch iteration: records each operation as text. */
static char seen[1024];
static void on_put(void* state, const char* k, size_t klen, const char* v,
                   size_t vlen) {
  CHECK(state == (void*)seen);
  size_t n = strlen(seen);
  snprintf(seen + n, sizeof(seen) - n, "put(%.*s,%.*s);", (int)klen, k,
           (int)vlen, v);
}
static void on_delete(void* state, const char* k, size_t klen) {
  CHECK(state == (void*)seen);
  size_t n = strlen(seen);
  snprintf(seen + n, sizeof(seen) - n, "del(%.*s);", (int)klen, k);
}

/* A comparator: destructor and name, counted. */
static int destroyed = 0;
static void cmp_destroy(void* state) {
  (void)state;
  destroyed++;
}
static int cmp_compare(void* state, const char* a, size_t alen,
                       const char* b, size_t blen) {
  (void)state;
  size_t n = alen < blen ? alen : blen;
  int r = memcmp(a, b, n);
  if (r == 0) r = alen < blen ? -1 : alen > blen ? 1 : 0;
  return r;
}
static int reverse_compare(void* state, const char* a, size_t alen,
                           const char* b, size_t blen) {
  return -cmp_compare(state, a, alen, b, blen);
}
/* Bytewise order under a name of its own, as LevelDB's own C test has
   one: accepted, since it orders keys as CairnDB does. */
static const char* bytewise_name(void* state) {
  (void)state;
  return "test.MemcmpComparator";
}
static const char* reverse_name(void* state) {
  (void)state;
  return "test.ReverseComparator";
}

/* A custom filter policy (never called by CairnDB). */
static char* filter_create(void* state, const char* const* keys,
                           const size_t* lens, int n, size_t* len) {
  (void)state;
  (void)keys;
  (void)lens;
  (void)n;
  *len = 4;
  char* f = malloc(4);
  memcpy(f, "fake", 4);
  return f;
}
static unsigned char filter_match(void* state, const char* key, size_t len,
                                  const char* filter, size_t flen) {
  (void)state;
  (void)key;
  (void)len;
  (void)filter;
  (void)flen;
  return 1;
}
static const char* filter_name(void* state) {
  (void)state;
  return "test.Filter";
}

/* Deletes the database's manifests and CURRENT. */
static void remove_manifest(const char* dbpath) {
  DIR* d = opendir(dbpath);
  CHECK(d != NULL);
  struct dirent* e;
  char p[4096];
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "MANIFEST-", 9) == 0 ||
        strcmp(e->d_name, "CURRENT") == 0) {
      snprintf(p, sizeof(p), "%s/%s", dbpath, e->d_name);
      CHECK(unlink(p) == 0);
    }
  }
  closedir(d);
}

static int dir_exists(const char* p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int main(int argc, char** argv) {
  CHECK(argc == 2);
  snprintf(dbpath, sizeof(dbpath), "%s/api_db", argv[1]);
  char* err = NULL;

  CHECK(leveldb_major_version() >= 1);
  CHECK(leveldb_minor_version() >= 0);

  /* Environment, cache, filter policies. */
  leveldb_env_t* env = leveldb_create_default_env();
  CHECK(env != NULL);
  char* testdir = leveldb_env_get_test_directory(env);
  CHECK(testdir != NULL && dir_exists(testdir));
  leveldb_free(testdir);
  leveldb_cache_t* cache = leveldb_cache_create_lru(1 << 20);
  leveldb_filterpolicy_t* bloom = leveldb_filterpolicy_create_bloom(10);
  leveldb_filterpolicy_t* custom =
      leveldb_filterpolicy_create(NULL, cmp_destroy, filter_create,
                                  filter_match, filter_name);

  leveldb_options_t* options = leveldb_options_create();
  leveldb_options_set_env(options, env);
  leveldb_options_set_info_log(options, NULL);
  leveldb_options_set_cache(options, cache);
  leveldb_options_set_filter_policy(options, bloom);
  leveldb_options_set_paranoid_checks(options, 1);
  leveldb_options_set_write_buffer_size(options, 1 << 20);
  leveldb_options_set_max_open_files(options, 100);
  leveldb_options_set_block_size(options, 4096);
  leveldb_options_set_block_restart_interval(options, 8);
  leveldb_options_set_max_file_size(options, 1 << 20);
  leveldb_options_set_compression(options, leveldb_no_compression);

  leveldb_destroy_db(options, dbpath, &err);
  CHECK_NO_ERROR(err);

  /* A missing database is not created unless asked. */
  leveldb_t* db = leveldb_open(options, dbpath, &err);
  CHECK(db == NULL);
  CHECK_ERROR(err, "create_if_missing");

  /* A comparator that does not order keys bytewise is refused. */
  leveldb_comparator_t* reverse = leveldb_comparator_create(
      NULL, cmp_destroy, reverse_compare, reverse_name);
  leveldb_options_set_create_if_missing(options, 1);
  leveldb_options_set_comparator(options, reverse);
  db = leveldb_open(options, dbpath, &err);
  CHECK(db == NULL);
  CHECK_ERROR(err, "test.ReverseComparator");
  leveldb_comparator_destroy(reverse);
  CHECK(destroyed == 1);

  /* A bytewise one is accepted, with a custom filter policy. */
  leveldb_comparator_t* bytewise =
      leveldb_comparator_create(NULL, cmp_destroy, cmp_compare, bytewise_name);
  leveldb_options_set_comparator(options, bytewise);
  leveldb_options_set_filter_policy(options, custom);
  leveldb_options_set_compression(options, leveldb_snappy_compression);
  db = leveldb_open(options, dbpath, &err);
  CHECK_NO_ERROR(err);
  CHECK(db != NULL);

  /* A second handle on an open database fails (locked), as does
     destroying it. */
  leveldb_t* again = leveldb_open(options, dbpath, &err);
  CHECK(again == NULL);
  CHECK_ERROR(err, "IO error");
  leveldb_destroy_db(options, dbpath, &err);
  CHECK_ERROR(err, "IO error");

  leveldb_writeoptions_t* wo = leveldb_writeoptions_create();
  leveldb_writeoptions_set_sync(wo, 1);
  leveldb_readoptions_t* ro = leveldb_readoptions_create();
  leveldb_readoptions_set_verify_checksums(ro, 1);
  leveldb_readoptions_set_fill_cache(ro, 0);

  /* Put, get, delete. */
  check_get(db, ro, "foo", NULL);
  put(db, wo, "foo", "hello");
  check_get(db, ro, "foo", "hello");
  leveldb_delete(db, wo, "foo", 3, &err);
  CHECK_NO_ERROR(err);
  check_get(db, ro, "foo", NULL);
  leveldb_delete(db, wo, "never", 5, &err); /* missing: not an error */
  CHECK_NO_ERROR(err);

  /* Binary keys and an empty value. */
  {
    const char k[] = {'b', 0, 'n'};
    const char v[] = {0, 1, 2, 0};
    leveldb_put(db, wo, k, 3, v, 4, &err);
    CHECK_NO_ERROR(err);
    size_t len;
    char* got = leveldb_get(db, ro, k, 3, &len, &err);
    CHECK_NO_ERROR(err);
    CHECK(got != NULL && len == 4 && memcmp(got, v, 4) == 0);
    free(got); /* plain free() works too */
    leveldb_delete(db, wo, k, 3, &err);
    CHECK_NO_ERROR(err);
    leveldb_put(db, wo, "empty", 5, "", 0, &err);
    CHECK_NO_ERROR(err);
    got = leveldb_get(db, ro, "empty", 5, &len, &err);
    CHECK_NO_ERROR(err);
    CHECK(got != NULL && len == 0);
    leveldb_free(got);
    leveldb_delete(db, wo, "empty", 5, &err);
    CHECK_NO_ERROR(err);
  }

  /* Write batches: put, delete, iterate, append, clear, write. */
  {
    leveldb_writebatch_t* wb = leveldb_writebatch_create();
    leveldb_writebatch_put(wb, "foo", 3, "a", 1);
    leveldb_writebatch_clear(wb);
    leveldb_writebatch_put(wb, "bar", 3, "b", 1);
    leveldb_writebatch_put(wb, "box", 3, "c", 1);
    leveldb_writebatch_delete(wb, "bar", 3);
    leveldb_writebatch_t* more = leveldb_writebatch_create();
    leveldb_writebatch_put(more, "baz", 3, "d", 1);
    leveldb_writebatch_append(wb, more);
    leveldb_writebatch_destroy(more);
    seen[0] = 0;
    leveldb_writebatch_iterate(wb, seen, on_put, on_delete);
    CHECK(strcmp(seen, "put(bar,b);put(box,c);del(bar);put(baz,d);") == 0);
    leveldb_write(db, wo, wb, &err);
    CHECK_NO_ERROR(err);
    /* The batch is unchanged by the write. */
    seen[0] = 0;
    leveldb_writebatch_iterate(wb, seen, on_put, on_delete);
    CHECK(strcmp(seen, "put(bar,b);put(box,c);del(bar);put(baz,d);") == 0);
    /* Appending a batch to itself doubles it. */
    leveldb_writebatch_append(wb, wb);
    seen[0] = 0;
    leveldb_writebatch_iterate(wb, seen, on_put, on_delete);
    CHECK(strcmp(seen,
                 "put(bar,b);put(box,c);del(bar);put(baz,d);"
                 "put(bar,b);put(box,c);del(bar);put(baz,d);") == 0);
    leveldb_writebatch_destroy(wb);
    check_get(db, ro, "bar", NULL);
    check_get(db, ro, "box", "c");
    check_get(db, ro, "baz", "d");
    leveldb_delete(db, wo, "box", 3, &err);
    CHECK_NO_ERROR(err);
    leveldb_delete(db, wo, "baz", 3, &err);
    CHECK_NO_ERROR(err);
  }

  /* An empty batch writes nothing and succeeds. */
  {
    leveldb_writebatch_t* wb = leveldb_writebatch_create();
    leveldb_write(db, wo, wb, &err);
    CHECK_NO_ERROR(err);
    leveldb_writebatch_destroy(wb);
  }

  /* A key over CairnDB's limit (64 KiB) fails the write carrying it; a
     batch holding one writes nothing. */
  {
    size_t big_len = 64 * 1024 + 1;
    char* big = calloc(big_len, 1);
    leveldb_put(db, wo, big, big_len, "v", 1, &err);
    CHECK_ERROR(err, "Invalid argument");
    leveldb_writebatch_t* wb = leveldb_writebatch_create();
    leveldb_writebatch_put(wb, "ok", 2, "v", 1);
    leveldb_writebatch_put(wb, big, big_len, "v", 1);
    leveldb_write(db, wo, wb, &err);
    CHECK_ERROR(err, "limit");
    check_get(db, ro, "ok", NULL);
    leveldb_writebatch_destroy(wb);
    free(big);
  }

  /* Iterators: both directions, seeks, direction changes. */
  leveldb_writeoptions_set_sync(wo, 0);
  put(db, wo, "a", "1");
  put(db, wo, "b", "2");
  put(db, wo, "c", "3");
  put(db, wo, "d", "4");
  put(db, wo, "e", "5");
  {
    leveldb_iterator_t* it = leveldb_create_iterator(db, ro);
    CHECK(!leveldb_iter_valid(it));
    size_t klen = 99;
    CHECK(leveldb_iter_key(it, &klen) == NULL && klen == 0);
    leveldb_iter_seek_to_first(it);
    check_iter(it, "a", "1");
    leveldb_iter_next(it);
    check_iter(it, "b", "2");
    leveldb_iter_next(it);
    check_iter(it, "c", "3");
    leveldb_iter_prev(it); /* forward -> backward */
    check_iter(it, "b", "2");
    leveldb_iter_prev(it);
    check_iter(it, "a", "1");
    leveldb_iter_prev(it); /* before the first */
    check_iter(it, NULL, NULL);
    leveldb_iter_seek_to_last(it);
    check_iter(it, "e", "5");
    leveldb_iter_prev(it);
    check_iter(it, "d", "4");
    leveldb_iter_next(it); /* backward -> forward */
    check_iter(it, "e", "5");
    leveldb_iter_next(it); /* past the last */
    check_iter(it, NULL, NULL);
    leveldb_iter_seek(it, "c", 1);
    check_iter(it, "c", "3");
    leveldb_iter_seek(it, "bb", 2); /* between keys: the next one */
    check_iter(it, "c", "3");
    leveldb_iter_prev(it);
    check_iter(it, "b", "2");
    leveldb_iter_next(it);
    check_iter(it, "c", "3");
    leveldb_iter_next(it);
    check_iter(it, "d", "4");
    leveldb_iter_seek(it, "f", 1); /* past everything */
    check_iter(it, NULL, NULL);
    leveldb_iter_seek(it, "", 0);
    check_iter(it, "a", "1");
    /* Writes after creation are not seen: one snapshot. */
    put(db, wo, "bb", "new");
    leveldb_iter_next(it);
    check_iter(it, "b", "2");
    leveldb_iter_next(it);
    check_iter(it, "c", "3");
    /* Full scans both ways. */
    int n = 0;
    for (leveldb_iter_seek_to_first(it); leveldb_iter_valid(it);
         leveldb_iter_next(it))
      n++;
    CHECK(n == 5);
    n = 0;
    for (leveldb_iter_seek_to_last(it); leveldb_iter_valid(it);
         leveldb_iter_prev(it))
      n++;
    CHECK(n == 5);
    leveldb_iter_get_error(it, &err);
    CHECK_NO_ERROR(err);
    leveldb_iter_destroy(it);
    leveldb_delete(db, wo, "bb", 2, &err);
    CHECK_NO_ERROR(err);
  }

  /* Snapshots: reads and iterators through read options. */
  {
    const leveldb_snapshot_t* snap = leveldb_create_snapshot(db);
    CHECK(snap != NULL);
    put(db, wo, "a", "changed");
    leveldb_delete(db, wo, "b", 1, &err);
    CHECK_NO_ERROR(err);
    check_get(db, ro, "a", "changed");
    check_get(db, ro, "b", NULL);
    leveldb_readoptions_set_snapshot(ro, snap);
    check_get(db, ro, "a", "1");
    check_get(db, ro, "b", "2");
    leveldb_iterator_t* it = leveldb_create_iterator(db, ro);
    leveldb_iter_seek_to_first(it);
    check_iter(it, "a", "1");
    leveldb_iter_next(it);
    check_iter(it, "b", "2");
    /* Releasing the snapshot while the iterator reads it is safe. */
    leveldb_release_snapshot(db, snap);
    leveldb_iter_next(it);
    check_iter(it, "c", "3");
    leveldb_iter_destroy(it);
    leveldb_readoptions_set_snapshot(ro, NULL);
    check_get(db, ro, "a", "changed");
  }

  /* Properties. */
  {
    char* prop = leveldb_property_value(db, "nosuchprop");
    CHECK(prop == NULL);
    prop = leveldb_property_value(db, "leveldb.stats");
    CHECK(prop != NULL && strstr(prop, "Level") != NULL);
    leveldb_free(prop);
    prop = leveldb_property_value(db, "leveldb.num-files-at-level0");
    CHECK(prop != NULL && strlen(prop) > 0);
    leveldb_free(prop);
    prop = leveldb_property_value(db, "leveldb.num-files-at-level99");
    CHECK(prop == NULL);
    prop = leveldb_property_value(db, "leveldb.sstables");
    CHECK(prop != NULL && strstr(prop, "level 0") != NULL);
    leveldb_free(prop);
    prop = leveldb_property_value(db, "leveldb.approximate-memory-usage");
    CHECK(prop != NULL && atoll(prop) > 0);
    leveldb_free(prop);
  }

  /* Approximate sizes and compaction. */
  {
    char key[32], val[101];
    memset(val, 'v', 100);
    val[100] = 0;
    for (int i = 0; i < 20000; i++) {
      snprintf(key, sizeof(key), "k%06d", i);
      leveldb_put(db, wo, key, strlen(key), val, 100, &err);
      CHECK_NO_ERROR(err);
    }
    leveldb_compact_range(db, NULL, 0, NULL, 0);
    leveldb_compact_range(db, "k000100", 7, "k000200", 7);
    char* files = leveldb_property_value(db, "leveldb.num-files-at-level0");
    CHECK(files != NULL);
    leveldb_free(files);
    const char* start[3] = {"k", "k010000", "k005000"};
    size_t start_len[3] = {1, 7, 7};
    const char* limit[3] = {"k010000", "k020000", "k005000"};
    size_t limit_len[3] = {7, 7, 7};
    uint64_t sizes[3] = {0, 0, 99};
    leveldb_approximate_sizes(db, 3, start, start_len, limit, limit_len,
                              sizes);
    CHECK(sizes[0] > 0);
    CHECK(sizes[1] > 0);
    CHECK(sizes[2] == 0); /* an empty range */
    /* The two halves hold alike entries: alike sizes. (Not compared with
       the raw bytes: the tables are compressed.) */
    CHECK(sizes[0] < 2 * sizes[1] && sizes[1] < 2 * sizes[0]);
    const char* all_start[1] = {""};
    size_t all_start_len[1] = {0};
    const char* all_limit[1] = {"z"};
    size_t all_limit_len[1] = {1};
    uint64_t all = 0;
    leveldb_approximate_sizes(db, 1, all_start, all_start_len, all_limit,
                              all_limit_len, &all);
    CHECK(all >= sizes[0] + sizes[1] - 8192);
    for (int i = 0; i < 20000; i++) {
      snprintf(key, sizeof(key), "k%06d", i);
      check_get(db, ro, key, val);
    }
  }

  leveldb_close(db);

  /* Reopen: the data is there; error_if_exists refuses it. */
  db = leveldb_open(options, dbpath, &err);
  CHECK_NO_ERROR(err);
  check_get(db, ro, "a", "changed");
  check_get(db, ro, "c", "3");
  check_get(db, ro, "b", NULL);
  leveldb_close(db);
  leveldb_options_set_error_if_exists(options, 1);
  db = leveldb_open(options, dbpath, &err);
  CHECK(db == NULL);
  CHECK_ERROR(err, "Invalid argument");
  leveldb_options_set_error_if_exists(options, 0);

  /* The comparator's name is recorded: an open under another (here none,
     which is LevelDB's bytewise comparator) is refused, naming both. */
  leveldb_options_set_comparator(options, NULL);
  db = leveldb_open(options, dbpath, &err);
  CHECK(db == NULL);
  CHECK_ERROR(err, "test.MemcmpComparator");
  leveldb_options_set_comparator(options, bytewise);

  /* Repair: with the manifest and CURRENT deleted the database does not
     open; repair rebuilds them from the tables and journals, and every
     write is there again. Repairing an open database is refused. */
  remove_manifest(dbpath);
  db = leveldb_open(options, dbpath, &err);
  CHECK(db == NULL);
  CHECK(err != NULL);
  free(err);
  err = NULL;
  leveldb_repair_db(options, dbpath, &err);
  CHECK_NO_ERROR(err);
  db = leveldb_open(options, dbpath, &err);
  CHECK_NO_ERROR(err);
  check_get(db, ro, "a", "changed");
  check_get(db, ro, "c", "3");
  check_get(db, ro, "b", NULL);
  leveldb_repair_db(options, dbpath, &err);
  CHECK_ERROR(err, "LOCK");
  leveldb_close(db);

  /* Destroy removes the database: it is missing afterwards. */
  leveldb_destroy_db(options, dbpath, &err);
  CHECK_NO_ERROR(err);
  CHECK(!dir_exists(dbpath));
  leveldb_options_set_create_if_missing(options, 0);
  db = leveldb_open(options, dbpath, &err);
  CHECK(db == NULL);
  CHECK_ERROR(err, "create_if_missing");
  /* Destroying a missing database is not an error. */
  leveldb_destroy_db(options, dbpath, &err);
  CHECK_NO_ERROR(err);

  /* An unknown compression is refused at open. */
  leveldb_options_set_create_if_missing(options, 1);
  leveldb_options_set_compression(options, 7);
  db = leveldb_open(options, dbpath, &err);
  CHECK(db == NULL);
  CHECK_ERROR(err, "compression");

  leveldb_options_destroy(options);
  leveldb_comparator_destroy(bytewise);
  CHECK(destroyed == 2);
  leveldb_filterpolicy_destroy(custom);
  CHECK(destroyed == 3);
  leveldb_filterpolicy_destroy(bloom);
  leveldb_cache_destroy(cache);
  leveldb_env_destroy(env);
  leveldb_readoptions_destroy(ro);
  leveldb_writeoptions_destroy(wo);
  printf("api_test: ok\n");
  return 0;
}
