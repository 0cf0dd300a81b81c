/*
 * LevelDB-compatible C API, served by CairnDB (libcairndb_c).
 *
 * The declarations match LevelDB 1.23's C API function for function, so a
 * program written against LevelDB's header compiles against this one and
 * links against libcairndb_c.so / libcairndb_c.a unchanged. Where CairnDB
 * differs, see crates/cairndb-c/README.md (comparators, repair's lost/
 * directory, options that are ignored).
 *
 * Conventions:
 *  - Every handle is an opaque pointer, made by a create/open function and
 *    freed by the matching destroy/close function.
 *  - Keys and values are passed as (pointer, length); they may hold any
 *    bytes, NUL included.
 *  - Booleans are unsigned char: 0 is false, anything else true.
 *  - A call that can fail takes "char** errptr" last. On entry *errptr is
 *    NULL or a malloc()ed message. On success it is left alone; on failure
 *    the old message is freed and *errptr points to a new malloc()ed,
 *    NUL-terminated message. Messages start with LevelDB's status words
 *    ("Invalid argument: ", "Corruption: ", "IO error: ",
 *    "Not implemented: ").
 *  - Buffers returned to the caller (leveldb_get, leveldb_property_value,
 *    error messages) are malloc()ed: release them with free() or
 *    leveldb_free().
 *  - A leveldb_t may be used by many threads at once; every other handle
 *    by one thread at a time.
 */

#ifndef CAIRNDB_LEVELDB_C_H
#define CAIRNDB_LEVELDB_C_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct leveldb_t leveldb_t;
typedef struct leveldb_cache_t leveldb_cache_t;
typedef struct leveldb_comparator_t leveldb_comparator_t;
typedef struct leveldb_env_t leveldb_env_t;
typedef struct leveldb_filelock_t leveldb_filelock_t;
typedef struct leveldb_filterpolicy_t leveldb_filterpolicy_t;
typedef struct leveldb_iterator_t leveldb_iterator_t;
typedef struct leveldb_logger_t leveldb_logger_t;
typedef struct leveldb_options_t leveldb_options_t;
typedef struct leveldb_randomfile_t leveldb_randomfile_t;
typedef struct leveldb_readoptions_t leveldb_readoptions_t;
typedef struct leveldb_seqfile_t leveldb_seqfile_t;
typedef struct leveldb_snapshot_t leveldb_snapshot_t;
typedef struct leveldb_writablefile_t leveldb_writablefile_t;
typedef struct leveldb_writebatch_t leveldb_writebatch_t;
typedef struct leveldb_writeoptions_t leveldb_writeoptions_t;

/* ---- Database ---------------------------------------------------------- */

/* Opens the database in directory `name`. Returns NULL and sets *errptr on
   failure (missing and create_if_missing unset, present and
   error_if_exists set, locked by another handle, damaged files, a
   comparator that does not order keys bytewise). */
leveldb_t* leveldb_open(const leveldb_options_t* options, const char* name,
                        char** errptr);

/* Closes the database and frees the handle. Release its iterators and
   snapshots first. */
void leveldb_close(leveldb_t* db);

void leveldb_put(leveldb_t* db, const leveldb_writeoptions_t* options,
                 const char* key, size_t keylen, const char* val,
                 size_t vallen, char** errptr);

/* Deleting a missing key is not an error. */
void leveldb_delete(leveldb_t* db, const leveldb_writeoptions_t* options,
                    const char* key, size_t keylen, char** errptr);

/* Applies every operation of `batch` atomically; the batch is unchanged. */
void leveldb_write(leveldb_t* db, const leveldb_writeoptions_t* options,
                   leveldb_writebatch_t* batch, char** errptr);

/* The value of `key` as a malloc()ed buffer of *vallen bytes (not
   NUL-terminated), or NULL with *vallen = 0 if the key is absent (or on
   error, with *errptr set). */
char* leveldb_get(leveldb_t* db, const leveldb_readoptions_t* options,
                  const char* key, size_t keylen, size_t* vallen,
                  char** errptr);

/* A cursor over the database as of now, or as of the options' snapshot.
   Not positioned until a seek. */
leveldb_iterator_t* leveldb_create_iterator(
    leveldb_t* db, const leveldb_readoptions_t* options);

const leveldb_snapshot_t* leveldb_create_snapshot(leveldb_t* db);

void leveldb_release_snapshot(leveldb_t* db,
                              const leveldb_snapshot_t* snapshot);

/* A malloc()ed NUL-terminated value, or NULL for an unknown property.
   Known: "leveldb.stats", "leveldb.num-files-at-level<N>",
   "leveldb.sstables", "leveldb.approximate-memory-usage", and
   "cairndb.stats". */
char* leveldb_property_value(leveldb_t* db, const char* propname);

/* sizes[i] = estimated bytes on disk of the keys in
   [range_start_key[i], range_limit_key[i]). Data still in memory is not
   counted. */
void leveldb_approximate_sizes(leveldb_t* db, int num_ranges,
                               const char* const* range_start_key,
                               const size_t* range_start_key_len,
                               const char* const* range_limit_key,
                               const size_t* range_limit_key_len,
                               uint64_t* sizes);

/* Compacts at least the keys in [start_key, limit_key] (NULL: open end).
   CairnDB compacts the whole database. */
void leveldb_compact_range(leveldb_t* db, const char* start_key,
                           size_t start_key_len, const char* limit_key,
                           size_t limit_key_len);

/* ---- Management -------------------------------------------------------- */

/* Removes the database in directory `name` (which must not be open). */
void leveldb_destroy_db(const leveldb_options_t* options, const char* name,
                        char** errptr);

/* Rebuilds the database in directory `name` (which must not be open)
   whose manifest is lost or damaged, from its tables and journals, as
   LevelDB's RepairDB: damaged tables are moved into `name/lost/`, never
   deleted. Sets *errptr only if the repair itself failed (missing or
   locked directory, unreadable or unwritable files). */
void leveldb_repair_db(const leveldb_options_t* options, const char* name,
                       char** errptr);

/* ---- Iterator ---------------------------------------------------------- */

void leveldb_iter_destroy(leveldb_iterator_t*);
unsigned char leveldb_iter_valid(const leveldb_iterator_t*);
void leveldb_iter_seek_to_first(leveldb_iterator_t*);
void leveldb_iter_seek_to_last(leveldb_iterator_t*);
/* Positions at the first key >= k. */
void leveldb_iter_seek(leveldb_iterator_t*, const char* k, size_t klen);
void leveldb_iter_next(leveldb_iterator_t*);
void leveldb_iter_prev(leveldb_iterator_t*);
/* Key and value of the current entry, valid until the iterator moves or
   is destroyed. */
const char* leveldb_iter_key(const leveldb_iterator_t*, size_t* klen);
const char* leveldb_iter_value(const leveldb_iterator_t*, size_t* vlen);
/* Sets *errptr if a read error ended the iteration. */
void leveldb_iter_get_error(const leveldb_iterator_t*, char** errptr);

/* ---- Write batch ------------------------------------------------------- */

leveldb_writebatch_t* leveldb_writebatch_create(void);
void leveldb_writebatch_destroy(leveldb_writebatch_t*);
void leveldb_writebatch_clear(leveldb_writebatch_t*);
void leveldb_writebatch_put(leveldb_writebatch_t*, const char* key,
                            size_t klen, const char* val, size_t vlen);
void leveldb_writebatch_delete(leveldb_writebatch_t*, const char* key,
                               size_t klen);
/* Calls put or deleted for each operation, in the order they were added. */
void leveldb_writebatch_iterate(
    const leveldb_writebatch_t*, void* state,
    void (*put)(void*, const char* k, size_t klen, const char* v,
                size_t vlen),
    void (*deleted)(void*, const char* k, size_t klen));
/* Appends the operations of source to destination. */
void leveldb_writebatch_append(leveldb_writebatch_t* destination,
                               const leveldb_writebatch_t* source);

/* ---- Options ----------------------------------------------------------- */

leveldb_options_t* leveldb_options_create(void);
void leveldb_options_destroy(leveldb_options_t*);
/* CairnDB orders keys bytewise: a comparator is accepted (at open) if it
   is named "leveldb.BytewiseComparator" or orders a fixed set of probe
   keys as bytewise order does (its compare function is called then, and
   never after); any other is refused. Its name is recorded when the
   database is created, and an open under another name is refused, as in
   LevelDB. */
void leveldb_options_set_comparator(leveldb_options_t*,
                                    leveldb_comparator_t*);
/* Accepted; CairnDB builds its own filters. */
void leveldb_options_set_filter_policy(leveldb_options_t*,
                                       leveldb_filterpolicy_t*);
void leveldb_options_set_create_if_missing(leveldb_options_t*,
                                           unsigned char);
void leveldb_options_set_error_if_exists(leveldb_options_t*, unsigned char);
/* Ignored (CairnDB always verifies checksums). */
void leveldb_options_set_paranoid_checks(leveldb_options_t*, unsigned char);
/* Ignored. */
void leveldb_options_set_env(leveldb_options_t*, leveldb_env_t*);
/* Ignored. */
void leveldb_options_set_info_log(leveldb_options_t*, leveldb_logger_t*);
/* Memtable size. */
void leveldb_options_set_write_buffer_size(leveldb_options_t*, size_t);
void leveldb_options_set_max_open_files(leveldb_options_t*, int);
/* The cache's capacity sizes CairnDB's block cache. */
void leveldb_options_set_cache(leveldb_options_t*, leveldb_cache_t*);
void leveldb_options_set_block_size(leveldb_options_t*, size_t);
void leveldb_options_set_block_restart_interval(leveldb_options_t*, int);
/* Target table size. */
void leveldb_options_set_max_file_size(leveldb_options_t*, size_t);

enum { leveldb_no_compression = 0, leveldb_snappy_compression = 1 };
/* Snappy is served by LZ4. */
void leveldb_options_set_compression(leveldb_options_t*, int);

/* ---- Comparator -------------------------------------------------------- */

leveldb_comparator_t* leveldb_comparator_create(
    void* state, void (*destructor)(void*),
    int (*compare)(void*, const char* a, size_t alen, const char* b,
                   size_t blen),
    const char* (*name)(void*));
/* Calls destructor(state). */
void leveldb_comparator_destroy(leveldb_comparator_t*);

/* ---- Filter policy ----------------------------------------------------- */

leveldb_filterpolicy_t* leveldb_filterpolicy_create(
    void* state, void (*destructor)(void*),
    char* (*create_filter)(void*, const char* const* key_array,
                           const size_t* key_length_array, int num_keys,
                           size_t* filter_length),
    unsigned char (*key_may_match)(void*, const char* key, size_t length,
                                   const char* filter, size_t filter_length),
    const char* (*name)(void*));
/* Calls destructor(state) for a policy made by leveldb_filterpolicy_create. */
void leveldb_filterpolicy_destroy(leveldb_filterpolicy_t*);
leveldb_filterpolicy_t* leveldb_filterpolicy_create_bloom(int bits_per_key);

/* ---- Read options ------------------------------------------------------ */

leveldb_readoptions_t* leveldb_readoptions_create(void);
void leveldb_readoptions_destroy(leveldb_readoptions_t*);
/* Ignored (CairnDB always verifies). */
void leveldb_readoptions_set_verify_checksums(leveldb_readoptions_t*,
                                              unsigned char);
/* Ignored. */
void leveldb_readoptions_set_fill_cache(leveldb_readoptions_t*,
                                        unsigned char);
/* NULL: read the latest state. */
void leveldb_readoptions_set_snapshot(leveldb_readoptions_t*,
                                      const leveldb_snapshot_t*);

/* ---- Write options ----------------------------------------------------- */

leveldb_writeoptions_t* leveldb_writeoptions_create(void);
void leveldb_writeoptions_destroy(leveldb_writeoptions_t*);
/* sync: the write returns once it survives power loss; otherwise it
   survives a crash of the process. */
void leveldb_writeoptions_set_sync(leveldb_writeoptions_t*, unsigned char);

/* ---- Cache ------------------------------------------------------------- */

leveldb_cache_t* leveldb_cache_create_lru(size_t capacity);
void leveldb_cache_destroy(leveldb_cache_t* cache);

/* ---- Env --------------------------------------------------------------- */

leveldb_env_t* leveldb_create_default_env(void);
void leveldb_env_destroy(leveldb_env_t*);
/* A directory for tests ($TEST_TMPDIR or under the temp dir), created if
   missing; malloc()ed, or NULL. */
char* leveldb_env_get_test_directory(leveldb_env_t*);

/* ---- Utility ----------------------------------------------------------- */

/* free(ptr), for buffers this library returned. */
void leveldb_free(void* ptr);

/* The LevelDB release whose C API this is: 1.23. */
int leveldb_major_version(void);
int leveldb_minor_version(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CAIRNDB_LEVELDB_C_H */
