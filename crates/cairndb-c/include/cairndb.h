/*
 * CairnDB's own C functions, next to the LevelDB-compatible API of
 * <leveldb/c.h> and with its conventions (opaque handles, (pointer, length)
 * keys, char** errptr, malloc()ed results freed with leveldb_free()).
 * Link with libcairndb_c.
 */

#ifndef CAIRNDB_H
#define CAIRNDB_H

#include "leveldb/c.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cairndb_txn_t cairndb_txn_t;
typedef struct cairndb_keyspace_t cairndb_keyspace_t;

/* ---- Transactions -------------------------------------------------------
   Optimistic: a transaction reads the database as of its begin plus its
   own writes, and its commit fails with CAIRNDB_CONFLICT if another commit
   since wrote a key it writes (serializable: or changed what it read).
   A transaction belongs to one thread at a time. */

enum {
  CAIRNDB_OK = 0,       /* committed */
  CAIRNDB_CONFLICT = 1, /* lost to a concurrent commit: nothing written */
  CAIRNDB_ERROR = 2     /* failed otherwise: see *errptr */
};

cairndb_txn_t* cairndb_txn_begin(leveldb_t* db, unsigned char serializable);
/* As leveldb_get, within the transaction. */
char* cairndb_txn_get(cairndb_txn_t* txn, const char* key, size_t keylen,
                      size_t* vallen, char** errptr);
void cairndb_txn_put(cairndb_txn_t* txn, const char* key, size_t keylen,
                     const char* val, size_t vallen, char** errptr);
void cairndb_txn_delete(cairndb_txn_t* txn, const char* key, size_t keylen,
                        char** errptr);
/* Commits (options: sync, or NULL) and frees the transaction. Returns
   CAIRNDB_OK, or CAIRNDB_CONFLICT / CAIRNDB_ERROR with *errptr set. */
int cairndb_txn_commit(cairndb_txn_t* txn,
                       const leveldb_writeoptions_t* options, char** errptr);
/* Drops the transaction's writes and frees it. */
void cairndb_txn_rollback(cairndb_txn_t* txn);

/* ---- Keyspaces ----------------------------------------------------------
   Named key spaces of one database, each ordered on its own; writes to
   several keyspaces share the database's journal. "default" is the
   keyspace leveldb_put and friends address. */

/* The keyspace `name`, created if missing; NULL and *errptr on failure. */
cairndb_keyspace_t* cairndb_keyspace_open(leveldb_t* db, const char* name,
                                          char** errptr);
/* Frees the handle; the keyspace and its data stay. */
void cairndb_keyspace_close(cairndb_keyspace_t* ks);
void cairndb_keyspace_put(cairndb_keyspace_t* ks,
                          const leveldb_writeoptions_t* options,
                          const char* key, size_t keylen, const char* val,
                          size_t vallen, char** errptr);
/* options may name a snapshot: the keyspace as of it. */
char* cairndb_keyspace_get(cairndb_keyspace_t* ks,
                           const leveldb_readoptions_t* options,
                           const char* key, size_t keylen, size_t* vallen,
                           char** errptr);
void cairndb_keyspace_delete(cairndb_keyspace_t* ks,
                             const leveldb_writeoptions_t* options,
                             const char* key, size_t keylen, char** errptr);
/* A cursor over keyspace `ks` of `db` (the database it was opened from),
   as of the options' snapshot or now. Use and destroy it with the
   leveldb_iter_* functions. A keyspace dropped shows as an error of the
   first seek (leveldb_iter_get_error). */
leveldb_iterator_t* cairndb_keyspace_create_iterator(
    leveldb_t* db, const cairndb_keyspace_t* ks,
    const leveldb_readoptions_t* options);
/* Drops the keyspace `name` and its data at once for every reader. Returns
   1 if it existed, 0 if not (or on error, with *errptr set). Handles to it
   then fail with a "dropped" error. "default" cannot be dropped. */
unsigned char cairndb_keyspace_drop(leveldb_t* db, const char* name,
                                    char** errptr);

/* ---- Writes with a sync flag -------------------------------------------
   sync != 0: the call returns once the write survives power loss. */

void cairndb_put(leveldb_t* db, const char* key, size_t keylen,
                 const char* val, size_t vallen, unsigned char sync,
                 char** errptr);
void cairndb_delete(leveldb_t* db, const char* key, size_t keylen,
                    unsigned char sync, char** errptr);
void cairndb_write(leveldb_t* db, leveldb_writebatch_t* batch,
                   unsigned char sync, char** errptr);

/* ---- Maintenance and stats --------------------------------------------- */

/* Writes the memtable to a table and waits. */
void cairndb_flush(leveldb_t* db, char** errptr);
/* Compacts the whole database and waits, reporting errors. */
void cairndb_compact(leveldb_t* db, char** errptr);
/* Every counter of the engine (cairndb::Stats) as text, one "name: value"
   per line; malloc()ed. */
char* cairndb_stats(leveldb_t* db);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CAIRNDB_H */
