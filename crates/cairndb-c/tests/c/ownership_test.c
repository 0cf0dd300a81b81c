/* Who frees what, checked under valgrind (tests/c_programs.rs): every
   buffer the library hands out is released by the caller as documented,
   every handle by its destroy function, and an error message left in
   *errptr is freed by the library when it stores the next one. Run
   without valgrind it checks the same calls succeed.
   Usage: ownership_test <scratch directory> */

#include <cairndb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static void noop_destroy(void* state) { free(state); }
static const char* bytewise(void* state) {
  (void)state;
  return "leveldb.BytewiseComparator";
}
static void count_put(void* state, const char* k, size_t kl, const char* v,
                      size_t vl) {
  (void)k;
  (void)kl;
  (void)v;
  (void)vl;
  (*(int*)state)++;
}
static void count_del(void* state, const char* k, size_t kl) {
  (void)k;
  (void)kl;
  (*(int*)state)++;
}

int main(int argc, char** argv) {
  CHECK(argc == 2);
  char path[4096], missing[4096];
  snprintf(path, sizeof(path), "%s/own_db", argv[1]);
  snprintf(missing, sizeof(missing), "%s/no_such_db", argv[1]);
  char* err = NULL;
  size_t len;

  leveldb_env_t* env = leveldb_create_default_env();
  char* dir = leveldb_env_get_test_directory(env);
  leveldb_free(dir);
  leveldb_cache_t* cache = leveldb_cache_create_lru(1 << 16);
  leveldb_filterpolicy_t* bloom = leveldb_filterpolicy_create_bloom(10);
  /* The comparator's state is freed by its destructor. */
  leveldb_comparator_t* cmp =
      leveldb_comparator_create(malloc(16), noop_destroy, NULL, bytewise);
  leveldb_options_t* options = leveldb_options_create();
  leveldb_options_set_env(options, env);
  leveldb_options_set_cache(options, cache);
  leveldb_options_set_filter_policy(options, bloom);
  leveldb_options_set_comparator(options, cmp);

  /* Two failures in a row into one errptr: the first message is freed by
     the library when the second is stored. */
  CHECK(leveldb_open(options, missing, &err) == NULL);
  CHECK(err != NULL);
  CHECK(leveldb_open(options, missing, &err) == NULL);
  leveldb_repair_db(options, missing, &err);
  CHECK_ERROR(err, "nothing to repair");

  leveldb_options_set_create_if_missing(options, 1);
  leveldb_t* db = leveldb_open(options, path, &err);
  CHECK_NO_ERROR(err);
  leveldb_writeoptions_t* wo = leveldb_writeoptions_create();
  leveldb_readoptions_t* ro = leveldb_readoptions_create();

  leveldb_put(db, wo, "key", 3, "value", 5, &err);
  CHECK_NO_ERROR(err);
  char* v = leveldb_get(db, ro, "key", 3, &len, &err);
  CHECK(same(v, len, "value"));
  leveldb_free(v);
  v = leveldb_get(db, ro, "key", 3, &len, &err);
  free(v); /* free() works as well as leveldb_free() */
  CHECK(leveldb_get(db, ro, "none", 4, &len, &err) == NULL);
  CHECK_NO_ERROR(err);

  leveldb_writebatch_t* wb = leveldb_writebatch_create();
  leveldb_writebatch_t* wb2 = leveldb_writebatch_create();
  leveldb_writebatch_put(wb, "b1", 2, "x", 1);
  leveldb_writebatch_delete(wb2, "b0", 2);
  leveldb_writebatch_append(wb, wb2);
  int ops = 0;
  leveldb_writebatch_iterate(wb, &ops, count_put, count_del);
  CHECK(ops == 2);
  leveldb_write(db, wo, wb, &err);
  CHECK_NO_ERROR(err);
  leveldb_writebatch_clear(wb);
  leveldb_writebatch_destroy(wb);
  leveldb_writebatch_destroy(wb2);

  const leveldb_snapshot_t* snap = leveldb_create_snapshot(db);
  leveldb_readoptions_set_snapshot(ro, snap);
  leveldb_iterator_t* it = leveldb_create_iterator(db, ro);
  leveldb_release_snapshot(db, snap);
  int n = 0;
  for (leveldb_iter_seek_to_last(it); leveldb_iter_valid(it);
       leveldb_iter_prev(it)) {
    leveldb_iter_key(it, &len);
    leveldb_iter_value(it, &len);
    n++;
  }
  CHECK(n == 2);
  leveldb_iter_seek(it, "b", 1);
  leveldb_iter_next(it);
  leveldb_iter_get_error(it, &err);
  CHECK_NO_ERROR(err);
  leveldb_iter_destroy(it);
  leveldb_readoptions_set_snapshot(ro, NULL);

  const char* props[] = {"leveldb.stats", "leveldb.sstables",
                         "leveldb.num-files-at-level0",
                         "leveldb.approximate-memory-usage", "cairndb.stats"};
  for (size_t i = 0; i < sizeof(props) / sizeof(props[0]); i++) {
    char* p = leveldb_property_value(db, props[i]);
    CHECK(p != NULL);
    leveldb_free(p);
  }
  CHECK(leveldb_property_value(db, "leveldb.nothing") == NULL);
  char* stats = cairndb_stats(db);
  leveldb_free(stats);

  const char* s[1] = {"a"};
  const char* l[1] = {"z"};
  size_t sl[1] = {1}, ll[1] = {1};
  uint64_t size;
  leveldb_approximate_sizes(db, 1, s, sl, l, ll, &size);

  cairndb_txn_t* t = cairndb_txn_begin(db, 0);
  cairndb_txn_put(t, "t", 1, "1", 1, &err);
  v = cairndb_txn_get(t, "t", 1, &len, &err);
  leveldb_free(v);
  CHECK(cairndb_txn_commit(t, wo, &err) == CAIRNDB_OK);
  t = cairndb_txn_begin(db, 1);
  cairndb_txn_rollback(t);
  cairndb_keyspace_t* ks = cairndb_keyspace_open(db, "ks", &err);
  cairndb_keyspace_put(ks, wo, "k", 1, "v", 1, &err);
  v = cairndb_keyspace_get(ks, ro, "k", 1, &len, &err);
  leveldb_free(v);
  it = cairndb_keyspace_create_iterator(db, ks, ro);
  leveldb_iter_seek_to_first(it);
  CHECK(leveldb_iter_valid(it));
  leveldb_iter_destroy(it);
  cairndb_keyspace_close(ks);
  CHECK_NO_ERROR(err);

  leveldb_close(db);
  leveldb_destroy_db(options, path, &err);
  CHECK_NO_ERROR(err);

  leveldb_options_destroy(options);
  leveldb_comparator_destroy(cmp);
  leveldb_filterpolicy_destroy(bloom);
  leveldb_cache_destroy(cache);
  leveldb_env_destroy(env);
  leveldb_readoptions_destroy(ro);
  leveldb_writeoptions_destroy(wo);
  printf("ownership_test: ok\n");
  return 0;
}
