/* Reading Examples and OFRecords laid out the way their writers lay them out (examples.c),
 * shared by the batch locator (examples.c), the batch value reader (values.c) and the
 * one-record decoder (onerecord.c). Every read is bounded by the end of its message; a
 * layout other than the writers' is "not handled here", never guessed at. */
#ifndef OFINDEX_PROTOWIRE_H
#define OFINDEX_PROTOWIRE_H

#include "native.h"

/* A varint at *p (before end) into *v; 0, or -1 when it is cut short or longer than
 * protobuf's 10 bytes, or its 10th byte holds more than the 64th bit. */
static inline int read_varint(const unsigned char **p, const unsigned char *end, uint64_t *v) {
    const unsigned char *q = *p;
    uint64_t x = 0;
    for (int shift = 0; shift < 70 && q < end; shift += 7) {
        unsigned char b = *q++;
        if (shift == 63 && b > 1)
            return -1;
        x |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *p = q;
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* read_varint, with the one- to three-byte varints of small numbers (token ids, labels)
 * read inline (1M random token ids below 50,000: 5.7 ms, 7.6 ms through read_varint; a
 * branch-free read of up to 7 bytes took 6.5 ms, bound by each read's wait for the one
 * before it). */
static inline int next_varint(const unsigned char **p, const unsigned char *end, uint64_t *v) {
    const unsigned char *q = *p;
    if (end - q >= 3) {
        if (q[0] < 0x80) {
            *v = q[0];
            *p = q + 1;
            return 0;
        }
        if (q[1] < 0x80) {
            *v = (uint64_t)(q[0] & 0x7F) | (uint64_t)q[1] << 7;
            *p = q + 2;
            return 0;
        }
        if (q[2] < 0x80) {
            *v = (uint64_t)(q[0] & 0x7F) | (uint64_t)(q[1] & 0x7F) << 7 | (uint64_t)q[2] << 14;
            *p = q + 3;
            return 0;
        }
    }
    return read_varint(p, end, v);
}

/* count_varints byte by byte from the state `run` (continuation bytes of the varint under
 * way): -1 when read_varint would refuse one (cut short, or a 10th byte holding more than
 * the 64th bit). */
static inline int64_t count_varint_bytes(const unsigned char *p, const unsigned char *end,
                                         unsigned run) {
    int64_t count = 0;
    unsigned bad = 0;
    for (; p < end; p++) {
        unsigned more = *p >> 7;
        bad |= (run == 9) & (*p > 1);
        run = (run + 1) * more;
        count += more ^ 1;
    }
    return bad || run ? -1 : count;
}

/* The high bit of each of 8 bytes; how many of them are set in `bits` (high bits only). */
#define HIGH_BITS 0x8080808080808080ULL
static inline unsigned high_bits_set(uint64_t bits) {
    return (unsigned)(((bits >> 7) * 0x0101010101010101ULL) >> 56);
}

/* The number of varints packed in [p, end), counted without decoding them, 8 bytes at a time
 * (the bytes that end a varint are those below 0x80: the token ids of 256 records of 1-512
 * ids below 50,000 counted in 0.56-0.80 ms, 1.13-1.73 ms a byte at a time, on the loaded
 * 2-core VM); -1 when read_varint would refuse one. A list with a varint of 9 bytes or more
 * (a negative int64) is counted byte by byte, where the 10th byte's rule is checked. */
static inline int64_t count_varints(const unsigned char *p, const unsigned char *end) {
    const unsigned char *start = p;
    int64_t count = 0;
    unsigned run = 0; /* continuation bytes since the last varint ended */
    for (; end - p >= 8; p += 8) {
        uint64_t ends = ~load_le(p, 8) & HIGH_BITS;
        if (!ends) {
            if ((run += 8) >= 9)
                return count_varint_bytes(start, end, 0);
            continue;
        }
        /* the continuation bytes before the first end join the run of the word before */
        if (run + high_bits_set(((ends & (0 - ends)) - 1) & HIGH_BITS) >= 9)
            return count_varint_bytes(start, end, 0);
        uint64_t upto = ends | ends >> 8;  /* every byte up to the last end */
        upto |= upto >> 16;
        upto |= upto >> 32;
        run = 8 - high_bits_set(upto & HIGH_BITS);
        count += high_bits_set(ends);
    }
    int64_t rest = count_varint_bytes(p, end, run);
    return rest < 0 ? -1 : count + rest;
}

/* A length-delimited field's body: the length varint at *p, checked to end by `end`.
 * Sets [*s, *e) and moves *p past the body; 0, or -1 when it does not fit or its length
 * is one protobuf refuses (encoded in more than 5 bytes, or 2**31 - 1 and more). */
static inline int read_body(const unsigned char **p, const unsigned char *end,
                            const unsigned char **s, const unsigned char **e) {
    const unsigned char *start = *p;
    uint64_t n;
    if (start < end && *start < 0x80) {  /* the usual one-byte length */
        n = *start;
        *p = start + 1;
    } else if (read_varint(p, end, &n) < 0 || *p - start > 5 || n >= 0x7FFFFFFF) {
        return -1;
    }
    if (n > (uint64_t)(end - *p))
        return -1;
    *s = *p;
    *e = *p + n;
    *p = *e;
    return 0;
}

/* Whether the key [ks, ke) is ASCII (other keys follow UTF-8's rules: the careful path). */
static inline int ascii_key(const unsigned char *ks, const unsigned char *ke) {
    for (const unsigned char *c = ks; c < ke; c++)
        if (*c >= 0x80)
            return 0;
    return 1;
}

/* One feature-map entry at *p as writers lay it out: field 1, holding the key (field 1, an
 * ASCII name) then the value (field 2) and nothing else. Sets the key [*ks, *ke) and the
 * value [*vs, *ve) and moves *p past the entry; 0, or -1 when laid out otherwise. */
static inline int read_entry(const unsigned char **p, const unsigned char *end,
                             const unsigned char **ks, const unsigned char **ke,
                             const unsigned char **vs, const unsigned char **ve) {
    const unsigned char *es, *ee, *q;
    if (*(*p)++ != 0x0A || read_body(p, end, &es, &ee) < 0)
        return -1;
    q = es;
    if (q >= ee || *q++ != 0x0A || read_body(&q, ee, ks, ke) < 0)
        return -1;
    if (q >= ee || *q++ != 0x12 || read_body(&q, ee, vs, ve) < 0 || q != ee)
        return -1;
    return ascii_key(*ks, *ke) ? 0 : -1;
}

/* A Feature [vs, ve) (not empty) holding one list message of kind 1 to max_kind (its oneof
 * field number) and nothing else: sets *kind and the list [*ls, *le); 0, or -1 otherwise. */
static inline int read_feature(const unsigned char *vs, const unsigned char *ve,
                               Py_ssize_t max_kind, Py_ssize_t *kind,
                               const unsigned char **ls, const unsigned char **le) {
    const unsigned char *q = vs;
    unsigned char tag = *q++;
    *kind = tag >> 3;
    if ((tag & 7) != 2 || *kind < 1 || *kind > max_kind || read_body(&q, ve, ls, le) < 0
        || q != ve)
        return -1;
    return 0;
}

/* How each list kind (oneof field number) stores its values: 'b' bytes, '4' / '8' packed
 * fixed-width numbers, 'v' packed varints read as int64, 'i' packed varints read as int32
 * (their low 32 bits); any other character: a kind not known. */
typedef struct {
    const char *kinds;
    Py_ssize_t max_kind;
} Family;

/* Field order of one located list: kind, number of values, value bytes start, end (the first
 * value for bytes), first value (varints), and the list message's own start and end. */
enum { KIND, COUNT, START, END, VALUE, LIST_START, LIST_END, SLOTS };

/* One list message [s, e) of a record starting at base, whose values are stored as `how`,
 * into row[] (all slots); 0, or -1 when not laid out as writers lay lists out. */
int read_list(const unsigned char *base, const unsigned char *s, const unsigned char *e,
              char how, int64_t *row);

/* The asked-for feature names, read without the GIL: k names of len[j] bytes at ptr[j]
 * (inside bytes objects the caller holds). */
typedef struct {
    Py_ssize_t k;
    const char **ptr;
    Py_ssize_t *len;
} Names;

/* `tuple` (of bytes; TypeError otherwise, naming `what`) as Names; 0, or -1 with an exception
 * set and nothing held. */
int get_names(PyObject *tuple, Names *names, const char *what);
void release_names(Names *names);

/* How many map entries read_map remembers the matched name of, from record to record. */
#define GUESSES 64

/* The feature map [p, end) of a record starting at base into rows[k * SLOTS] for the k
 * names: kind 0 for a name not in the map; 0, or -1 when the record is
 * not handled here (a layout other than the writers', a non-ASCII key, an asked-for name
 * twice or with no list set). `guesses` (GUESSES of them, or NULL): the name each entry
 * matched in the record before (its writer's order), tried first, and updated. */
int read_map(const unsigned char *base, const unsigned char *p, const unsigned char *end,
             const Family *fam, const Names *names, int64_t *rows, Py_ssize_t *guesses);

/* The records of a call: `records` itself (a list of bytes), or with `spans` (a tuple of
 * int64 arrays which, starts, ends) bytes [starts[i], ends[i]) of records[which[i]]
 * (buffers such as memory maps, acquired in views, each checked to hold its spans; `held`
 * of them acquired so far). The list is read from `items`, a snapshot taken when the call
 * starts (snapshot.c), which also keeps bytes records alive. */
typedef struct {
    Py_ssize_t n, held;
    PyObject *items;
    Py_buffer *views;
    const unsigned char **ptr;
    Py_ssize_t *len;
} Records;

/* Acquire the records (`what` names the caller in errors); 0, or -1 with an exception set
 * and nothing held. */
int get_records(PyObject *records, PyObject *spans, Records *r, const char *what);
void release_records(Records *r);

/* The feature map of a record [p, end): the record itself (an OFRecord), or with `wrapped`
 * (an Example) the body of its one field 1, into [*ms, *me); 0, or -1 when the Example
 * holds anything else. */
static inline int feature_map(const unsigned char *p, const unsigned char *end, int wrapped,
                              const unsigned char **ms, const unsigned char **me) {
    *ms = p;
    *me = end;
    if (!wrapped || p == end)
        return 0;
    if (*p++ != 0x0A || read_body(&p, end, ms, me) < 0 || p != end)
        return -1;
    return 0;
}

#endif
