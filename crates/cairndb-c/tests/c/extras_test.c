/* The CairnDB extras of <cairndb.h>: transactions (commit, rollback,
   conflict), keyspaces, writes with a sync flag, flush, compact, stats.
   Usage: extras_test <scratch directory> */

#include <cairndb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* `len` is read here, after the call that set it (the order in which a
   call's arguments are evaluated is unspecified). */
static void check_value(char* got, const size_t* len, const char* want) {
  if (want == NULL) {
    CHECK(got == NULL && *len == 0);
  } else {
    CHECK(same(got, *len, want));
  }
  leveldb_free(got);
}

int main(int argc, char** argv) {
  CHECK(argc == 2);
  char path[4096];
  snprintf(path, sizeof(path), "%s/extras_db", argv[1]);
  char* err = NULL;
  size_t len;
  leveldb_options_t* options = leveldb_options_create();
  leveldb_options_set_create_if_missing(options, 1);
  leveldb_t* db = leveldb_open(options, path, &err);
  CHECK_NO_ERROR(err);
  leveldb_readoptions_t* ro = leveldb_readoptions_create();
  leveldb_writeoptions_t* wo = leveldb_writeoptions_create();

  /* Writes with a sync flag. */
  cairndb_put(db, "a", 1, "1", 1, 1, &err);
  CHECK_NO_ERROR(err);
  cairndb_put(db, "b", 1, "2", 1, 0, &err);
  CHECK_NO_ERROR(err);
  cairndb_delete(db, "b", 1, 1, &err);
  CHECK_NO_ERROR(err);
  leveldb_writebatch_t* wb = leveldb_writebatch_create();
  leveldb_writebatch_put(wb, "c", 1, "3", 1);
  cairndb_write(db, wb, 1, &err);
  CHECK_NO_ERROR(err);
  leveldb_writebatch_destroy(wb);
  check_value(leveldb_get(db, ro, "a", 1, &len, &err), &len, "1");
  check_value(leveldb_get(db, ro, "b", 1, &len, &err), &len, NULL);
  check_value(leveldb_get(db, ro, "c", 1, &len, &err), &len, "3");
  CHECK_NO_ERROR(err);

  /* A transaction sees its own writes; others see them at commit. */
  cairndb_txn_t* t = cairndb_txn_begin(db, 0);
  CHECK(t != NULL);
  check_value(cairndb_txn_get(t, "a", 1, &len, &err), &len, "1");
  cairndb_txn_put(t, "a", 1, "10", 2, &err);
  CHECK_NO_ERROR(err);
  cairndb_txn_delete(t, "c", 1, &err);
  CHECK_NO_ERROR(err);
  check_value(cairndb_txn_get(t, "a", 1, &len, &err), &len, "10");
  check_value(cairndb_txn_get(t, "c", 1, &len, &err), &len, NULL);
  check_value(leveldb_get(db, ro, "a", 1, &len, &err), &len, "1");
  CHECK(cairndb_txn_commit(t, wo, &err) == CAIRNDB_OK);
  CHECK_NO_ERROR(err);
  check_value(leveldb_get(db, ro, "a", 1, &len, &err), &len, "10");
  check_value(leveldb_get(db, ro, "c", 1, &len, &err), &len, NULL);

  /* Rollback writes nothing. */
  t = cairndb_txn_begin(db, 1);
  cairndb_txn_put(t, "r", 1, "x", 1, &err);
  CHECK_NO_ERROR(err);
  cairndb_txn_rollback(t);
  check_value(leveldb_get(db, ro, "r", 1, &len, &err), &len, NULL);

  /* Two transactions writing one key: the second commit conflicts. */
  cairndb_txn_t* t1 = cairndb_txn_begin(db, 0);
  cairndb_txn_t* t2 = cairndb_txn_begin(db, 0);
  cairndb_txn_put(t1, "k", 1, "one", 3, &err);
  CHECK_NO_ERROR(err);
  cairndb_txn_put(t2, "k", 1, "two", 3, &err);
  CHECK_NO_ERROR(err);
  CHECK(cairndb_txn_commit(t1, NULL, &err) == CAIRNDB_OK);
  CHECK_NO_ERROR(err);
  CHECK(cairndb_txn_commit(t2, NULL, &err) == CAIRNDB_CONFLICT);
  CHECK_ERROR(err, "Conflict");
  check_value(leveldb_get(db, ro, "k", 1, &len, &err), &len, "one");

  /* Keyspaces: separate from the default one; snapshots see them as of
     their instant; dropped keyspaces refuse their handles. */
  cairndb_keyspace_t* ks = cairndb_keyspace_open(db, "users", &err);
  CHECK_NO_ERROR(err);
  CHECK(ks != NULL);
  cairndb_keyspace_put(ks, wo, "a", 1, "alice", 5, &err);
  CHECK_NO_ERROR(err);
  check_value(cairndb_keyspace_get(ks, ro, "a", 1, &len, &err), &len, "alice");
  check_value(leveldb_get(db, ro, "a", 1, &len, &err), &len, "10");
  const leveldb_snapshot_t* snap = leveldb_create_snapshot(db);
  cairndb_keyspace_delete(ks, wo, "a", 1, &err);
  CHECK_NO_ERROR(err);
  check_value(cairndb_keyspace_get(ks, ro, "a", 1, &len, &err), &len, NULL);
  leveldb_readoptions_t* at_snap = leveldb_readoptions_create();
  leveldb_readoptions_set_snapshot(at_snap, snap);
  check_value(cairndb_keyspace_get(ks, at_snap, "a", 1, &len, &err), &len,
              "alice");
  leveldb_readoptions_destroy(at_snap);
  leveldb_release_snapshot(db, snap);
  CHECK(cairndb_keyspace_drop(db, "users", &err) == 1);
  CHECK_NO_ERROR(err);
  CHECK(cairndb_keyspace_drop(db, "users", &err) == 0);
  CHECK_NO_ERROR(err);
  char* v = cairndb_keyspace_get(ks, ro, "a", 1, &len, &err);
  CHECK(v == NULL);
  CHECK_ERROR(err, "dropped");
  cairndb_keyspace_close(ks);
  CHECK(cairndb_keyspace_drop(db, "default", &err) == 0);
  CHECK_ERROR(err, "Invalid argument");
  CHECK(cairndb_keyspace_open(db, NULL, &err) == NULL);
  CHECK_ERROR(err, "Invalid argument");

  /* Iterating a keyspace: its keys only, both ways, from one snapshot. */
  {
    cairndb_keyspace_t* items = cairndb_keyspace_open(db, "items", &err);
    CHECK_NO_ERROR(err);
    cairndb_keyspace_put(items, wo, "x", 1, "1", 1, &err);
    cairndb_keyspace_put(items, wo, "y", 1, "2", 1, &err);
    cairndb_keyspace_put(items, wo, "z", 1, "3", 1, &err);
    CHECK_NO_ERROR(err);
    leveldb_iterator_t* it = cairndb_keyspace_create_iterator(db, items, ro);
    CHECK(it != NULL);
    cairndb_keyspace_delete(items, wo, "y", 1, &err); /* not seen */
    CHECK_NO_ERROR(err);
    const char* want = "xyz";
    int n = 0;
    for (leveldb_iter_seek_to_first(it); leveldb_iter_valid(it);
         leveldb_iter_next(it), n++) {
      const char* k = leveldb_iter_key(it, &len);
      CHECK(n < 3 && len == 1 && k[0] == want[n]);
    }
    CHECK(n == 3);
    const char* got;
    leveldb_iter_seek(it, "y", 1);
    leveldb_iter_prev(it);
    got = leveldb_iter_key(it, &len);
    CHECK(same(got, len, "x"));
    got = leveldb_iter_value(it, &len);
    CHECK(same(got, len, "1"));
    leveldb_iter_seek_to_last(it);
    got = leveldb_iter_key(it, &len);
    CHECK(same(got, len, "z"));
    leveldb_iter_get_error(it, &err);
    CHECK_NO_ERROR(err);
    leveldb_iter_destroy(it);
    /* A dropped keyspace's iterator reports it. */
    CHECK(cairndb_keyspace_drop(db, "items", &err) == 1);
    it = cairndb_keyspace_create_iterator(db, items, ro);
    leveldb_iter_seek_to_first(it);
    CHECK(!leveldb_iter_valid(it));
    leveldb_iter_get_error(it, &err);
    CHECK_ERROR(err, "dropped");
    leveldb_iter_destroy(it);
    cairndb_keyspace_close(items);
  }

  /* Flush, compact, stats. */
  cairndb_flush(db, &err);
  CHECK_NO_ERROR(err);
  cairndb_compact(db, &err);
  CHECK_NO_ERROR(err);
  char* stats = cairndb_stats(db);
  CHECK(stats != NULL && strstr(stats, "tables_per_level: ") != NULL);
  CHECK(strstr(stats, "flushes: ") != NULL);
  leveldb_free(stats);
  stats = leveldb_property_value(db, "cairndb.stats");
  CHECK(stats != NULL && strstr(stats, "last_seqno: ") != NULL);
  leveldb_free(stats);

  leveldb_close(db);
  leveldb_destroy_db(options, path, &err);
  CHECK_NO_ERROR(err);
  leveldb_options_destroy(options);
  leveldb_readoptions_destroy(ro);
  leveldb_writeoptions_destroy(wo);
  printf("extras_test: ok\n");
  return 0;
}
