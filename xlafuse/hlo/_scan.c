/* xlafuse.hlo._scan: the reader's fast path in C, built when a C compiler is at hand.
 *
 * `scan_lines` reads instructions in the one-line form that XLA prints, from a position in the
 * text, and appends an `Instruction` for each to a list, exactly as the Python fast path of
 * `_reader.scan` (the regex `_FAST`) would. It stops at the first line it does not take whole, for
 * any reason, and leaves that line to the Python reader: the end of a body (`}`), a form the
 * regex reads differently (typed operands, nested values, a second `metadata=`), non-ASCII
 * names, a shape that the reader's `shape_of` does not read from its text alone, a number that may not fit in int64 (a tuple index,
 * a metadata line or frame: more than 18 digits), and any text the regex rejects. So what it
 * takes is a subset of what `_FAST` takes, read into the same fields.
 *
 * `scan_computations` reads whole computations the same way: a header on one line as
 * `_FAST_HEADER` reads it, lines as above, the closing `}`; with each one's name index, and
 * whether its names and operands need the Python reader's check. It stops at the first one
 * it does not read whole (nothing of that one is kept), at a stack-frame table, or at the end.
 *
 * Nothing is kept from one call to the next (no static table): what a call reads depends on
 * its arguments only, so no parse depends on an earlier one (issue 30).
 *
 * `tests/test_hlo_scan.py` checks the reader with and without this file against each other,
 * over the whole corpus and over fuzzed texts. Without it (no compiler, or a checkout run from
 * its folder) the reader is pure Python, with the same results, 1.6-1.9 times slower.
 *
 * The grammar of a line, as in `_FAST` (`[ \t]` is a blank):
 *   [ROOT blank+] [%]NAME blank* = blank* SHAPE blank+ OPCODE ( OPERANDS ) ATTRS blank* \n
 *   NAME     [A-Za-z_][A-Za-z0-9_.-]*
 *   SHAPE    dtype[dims]{layout}?  or a tuple ( ... ) with parentheses one level deep
 *   OPERANDS names `%a, %b`, with `#N` tuple indices and XLA's `/ *index=N* /` comments;
 *            anything for `constant` and `parameter` (no parentheses, quotes or line breaks)
 *   ATTRS    (, blank* KEY= blank* VALUE)*, where VALUE is words, "strings",
 *            {braces} five deep, [brackets] and (parentheses), all on the line; and
 *            `metadata={...}` with no braces inside, read here as `_read_metadata` reads it,
 *            or by the caller's `metadata_of` when it names a stack frame.
 * After the line: white space up to the next token, which is not ',' or '/'.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The text, when Python keeps it one byte a character (Latin-1, so all ASCII text); other
 * texts are left to the Python reader whole. */
typedef struct {
    const Py_UCS1 *chars;
    Py_ssize_t n;
} Text;

/* The character at i, or 0 past the end (the reader refuses text with a NUL). */
static inline Py_UCS4 at(const Text *t, Py_ssize_t i) { return i < t->n ? t->chars[i] : 0; }

static inline int is_blank(Py_UCS4 c) { return c == ' ' || c == '\t'; }
static inline int is_lower(Py_UCS4 c) { return c >= 'a' && c <= 'z'; }
static inline int is_digit(Py_UCS4 c) { return c >= '0' && c <= '9'; }
static inline int is_alpha(Py_UCS4 c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static inline int is_name_start(Py_UCS4 c) { return is_alpha(c) || c == '_'; }
static inline int is_name(Py_UCS4 c) {
    return is_alpha(c) || is_digit(c) || c == '_' || c == '.' || c == '-';
}
static inline int is_opcode(Py_UCS4 c) {
    return is_lower(c) || is_digit(c) || c == '_' || c == '-';
}
/* White space as the regex's \s sees it, for ASCII; others are left to the regex. */
static inline int is_ascii_space(Py_UCS4 c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
/* A character of a bare word in a value: `[^\s,{}()\[\]"/]`, ASCII and printable only. */
static inline int is_bare(Py_UCS4 c) {
    return c > ' ' && c < 0x7f && c != ',' && c != '{' && c != '}' && c != '(' && c != ')' &&
           c != '[' && c != ']' && c != '"' && c != '/';
}

#define NO (-1) /* a scan that does not take the text */

/* A number of at most this many digits fits in int64; a longer one may not, and the Python
 * reader, which rejects one that does not, reads its line (`_reader._INT64_DIGITS`). */
#define INT64_DIGITS 18

static Py_ssize_t skip_blanks(const Text *t, Py_ssize_t p) {
    while (is_blank(at(t, p))) p++;
    return p;
}

static int starts_with(const Text *t, Py_ssize_t p, const char *word) {
    for (; *word; word++, p++)
        if (at(t, p) != (Py_UCS4)(unsigned char)*word) return 0;
    return 1;
}

/* A string on one line: "..." with backslash escapes; the position after it, or NO. */
static Py_ssize_t scan_string(const Text *t, Py_ssize_t p) {
    for (p++;; p++) {
        Py_UCS4 c = at(t, p);
        if (c == '"') return p + 1;
        if (c == '\\') {
            c = at(t, ++p);
            if (c == '\n' || c == 0) return NO;
        } else if (c == '\n' || c == 0) {
            return NO;
        }
    }
}

/* `{...}` on one line, strings and nested braces inside, at most five deep. */
static Py_ssize_t scan_braces(const Text *t, Py_ssize_t p, int depth) {
    if (depth > 5) return NO;
    for (p++;;) {
        Py_UCS4 c = at(t, p);
        if (c == '}') return p + 1;
        if (c == '\n' || c == 0) return NO;
        if (c == '"') p = scan_string(t, p);
        else if (c == '{') p = scan_braces(t, p, depth + 1);
        else p++;
        if (p == NO) return NO;
    }
}

/* `open ... close` on one line, with neither bracket inside. */
static Py_ssize_t scan_flat(const Text *t, Py_ssize_t p, Py_UCS4 open, Py_UCS4 close) {
    for (p++;; p++) {
        Py_UCS4 c = at(t, p);
        if (c == close) return p + 1;
        if (c == open || c == '\n' || c == 0) return NO;
    }
}

/* An attribute's value: words, strings and groups in a row; the position after, or NO. */
static Py_ssize_t scan_value(const Text *t, Py_ssize_t p) {
    Py_ssize_t start = p;
    for (;;) {
        Py_UCS4 c = at(t, p);
        if (is_bare(c)) {
            while (is_bare(at(t, p))) p++;
            continue;
        }
        if (c == '"') p = scan_string(t, p);
        else if (c == '{') p = scan_braces(t, p, 1);
        else if (c == '[') p = scan_flat(t, p, '[', ']');
        else if (c == '(') p = scan_flat(t, p, '(', ')');
        else break;
        if (p == NO) return NO;
    }
    return p > start ? p : NO;
}

/* A shape: `dtype[dims]{layout}` or a tuple one level deep; the position after, or NO. */
static Py_ssize_t scan_shape(const Text *t, Py_ssize_t p) {
    if (at(t, p) == '(') {
        for (p++;;) {
            Py_UCS4 c = at(t, p);
            if (c == ')') return p + 1;
            if (c == '(') {
                p = scan_flat(t, p, '(', ')');
                if (p == NO) return NO;
            } else if (c == '\n' || c == 0) {
                return NO;
            } else {
                p++;
            }
        }
    }
    if (!is_lower(at(t, p))) return NO;
    while (is_lower(at(t, p)) || is_digit(at(t, p))) p++;
    if (at(t, p) != '[') return NO;
    for (p++; at(t, p) != ']'; p++) {
        if (at(t, p) == '\n' || at(t, p) == 0) return NO;
    }
    p++;
    if (at(t, p) == '{') {
        for (p++; at(t, p) != '}'; p++) {
            Py_UCS4 c = at(t, p);
            if (c == '{' || c == '\n' || c == 0) return NO;
        }
        p++;
    }
    return p;
}

/* One instruction line's fields, as positions in the text. */
typedef struct {
    int root;
    Py_ssize_t name, name_end, shape, shape_end;
    PyObject *opcode;                  /* a new reference, once the opcode is read */
    Py_ssize_t operands, operands_end; /* inside the parentheses */
    Py_ssize_t attrs, attrs_end;       /* `, key=value, ...` after them */
    Py_ssize_t meta, meta_end;         /* inside `metadata={...}`; meta < 0: none */
    Py_ssize_t end;                    /* the next token */
    int literal;                       /* constant, parameter: operands not read */
} Line;

/* Operands as names: [blanks] [comment] [%]NAME [#N] [blanks], separated by ','. */
static int scan_operand_names(const Text *t, Py_ssize_t p, Py_ssize_t *end) {
    if (at(t, p) == ')') {
        *end = p;
        return 1;
    }
    for (;;) {
        p = skip_blanks(t, p);
        if (starts_with(t, p, "/*index=")) {
            p += 8;
            if (!is_digit(at(t, p))) return 0;
            while (is_digit(at(t, p))) p++;
            if (!starts_with(t, p, "*/")) return 0;
            p = skip_blanks(t, p + 2);
        }
        if (at(t, p) == '%') p++;
        if (!is_name_start(at(t, p))) return 0;
        while (is_name(at(t, p))) p++;
        if (at(t, p) == '#') {
            Py_ssize_t digits = ++p;
            if (!is_digit(at(t, p))) return 0;
            while (is_digit(at(t, p))) p++;
            if (p - digits > INT64_DIGITS) return 0; /* may not fit in int64: Python's */
        }
        p = skip_blanks(t, p);
        if (at(t, p) == ')') {
            *end = p;
            return 1;
        }
        if (at(t, p) != ',') return 0;
        p++;
    }
}

/* Spans of the text already made into objects, found again by their characters, so that a
 * repeated span is one object: an operand is the very string of the instruction it names (no
 * copy to make, hash or free), and an opcode, shape or metadata text is looked up once. */
typedef struct {
    Py_hash_t hash;
    PyObject *key; /* an ASCII str of the span's characters */
    PyObject *value;
} Entry;

typedef struct {
    Entry *entries;
    Py_ssize_t size; /* a power of two; 0 before the first entry */
    Py_ssize_t used;
} Table;

/* FNV-1a of a span; -1 when it has a character outside ASCII (such spans are not kept). */
static Py_hash_t span_hash(const Text *t, Py_ssize_t start, Py_ssize_t end) {
    uint64_t h = 14695981039346656037ULL;
    for (Py_ssize_t i = start; i < end; i++) {
        Py_UCS4 c = at(t, i);
        if (c >= 0x80) return -1;
        h = (h ^ c) * 1099511628211ULL;
    }
    return (Py_hash_t)(h >> 2);
}

static int span_equals(const Text *t, Py_ssize_t start, PyObject *key) {
    return memcmp(t->chars + start, PyUnicode_1BYTE_DATA(key), PyUnicode_GET_LENGTH(key)) == 0;
}

/* The value kept for the span (borrowed), or NULL. */
static PyObject *table_get(const Table *table, const Text *t, Py_ssize_t start, Py_ssize_t end,
                           Py_hash_t hash) {
    if (hash < 0 || table->size == 0) return NULL;
    size_t mask = (size_t)table->size - 1;
    for (size_t i = (size_t)hash & mask;; i = (i + 1) & mask) {
        const Entry *e = &table->entries[i];
        if (!e->key) return NULL;
        if (e->hash == hash && PyUnicode_GET_LENGTH(e->key) == end - start &&
            span_equals(t, start, e->key))
            return e->value;
    }
}

static void table_clear(Table *table) {
    for (Py_ssize_t i = 0; i < table->size; i++) {
        Py_XDECREF(table->entries[i].key);
        Py_XDECREF(table->entries[i].value);
    }
    PyMem_Free(table->entries);
    table->entries = NULL;
    table->size = table->used = 0;
}

static void table_insert(Table *table, Entry entry) {
    size_t mask = (size_t)table->size - 1;
    size_t i = (size_t)entry.hash & mask;
    while (table->entries[i].key) i = (i + 1) & mask;
    table->entries[i] = entry;
    table->used++;
}

/* Keeps key -> value (new references); 0, or -1 out of memory. A key with a hash of -1 (not
 * ASCII) is not kept. */
static int table_put(Table *table, Py_hash_t hash, PyObject *key, PyObject *value) {
    if (hash < 0) return 0;
    if (2 * (table->used + 1) > table->size) {
        Table grown = {PyMem_Calloc(table->size ? 2 * table->size : 16, sizeof(Entry)),
                       table->size ? 2 * table->size : 16, 0};
        if (!grown.entries) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < table->size; i++)
            if (table->entries[i].key) table_insert(&grown, table->entries[i]);
        PyMem_Free(table->entries);
        *table = grown;
    }
    Py_INCREF(key);
    Py_INCREF(value);
    table_insert(table, (Entry){hash, key, value});
    return 0;
}

/* What one call reads with: the text, the caller's list, readers and types, and the names,
 * attribute texts, metadata texts, opcodes and shapes of this call; emptied when it returns
 * (a module's metadata may name its own stack-frame tables, and a shape's text may read
 * otherwise in another text: see `_reader.Reader._fast_shape`). */
typedef struct {
    PyObject *text, *out, *shape_of, *metadata_of, *instruction, *attributes,
        *no_attributes, *literal_opcodes;
    Text t;
    Table names, attributes_made, metadata, opcodes, shapes;
    Py_ssize_t unresolved; /* operands not among the names made before them in this body */
} Scan;

/* The span as a str: the one kept in `table` when there is one (a new reference). */
static PyObject *span_object(Scan *scan, Table *table, Py_ssize_t start, Py_ssize_t end) {
    Py_hash_t hash = span_hash(&scan->t, start, end);
    PyObject *kept = table_get(table, &scan->t, start, end, hash);
    if (kept) {
        Py_INCREF(kept);
        return kept;
    }
    PyObject *made = PyUnicode_Substring(scan->text, start, end);
    if (made && table_put(table, hash, made, made) < 0) Py_CLEAR(made);
    return made;
}

/* Whether the line at p is one instruction this scanner takes (1; 0: not; -1: an error);
 * fills `line`. */
static int scan_line(Scan *scan, Py_ssize_t p, Line *line) {
    const Text *t = &scan->t;
    line->root = 0;
    if (starts_with(t, p, "ROOT") && is_blank(at(t, p + 4))) {
        Py_ssize_t q = skip_blanks(t, p + 4);
        if (at(t, q) != '%' && !is_name_start(at(t, q))) return 0; /* a name `ROOT`: the regex */
        line->root = 1;
        p = q;
    }
    if (at(t, p) == '%') p++;
    if (!is_name_start(at(t, p))) return 0;
    line->name = p;
    while (is_name(at(t, p))) p++;
    line->name_end = p;
    p = skip_blanks(t, p);
    if (at(t, p) != '=') return 0;
    p = skip_blanks(t, p + 1);
    line->shape = p;
    p = scan_shape(t, p);
    if (p == NO || !is_blank(at(t, p))) return 0;
    line->shape_end = p;
    p = skip_blanks(t, p);
    if (!is_lower(at(t, p))) return 0;
    Py_ssize_t opcode = p;
    while (is_opcode(at(t, p))) p++;
    if (at(t, p) != '(') return 0;
    line->opcode = span_object(scan, &scan->opcodes, opcode, p);
    if (!line->opcode) return -1;
    int literal = PySet_Contains(scan->literal_opcodes, line->opcode);
    if (literal < 0) return -1;
    line->literal = literal;
    line->operands = ++p;
    if (literal) { /* constant, parameter: anything but ( ) " \n */
        for (;; p++) {
            Py_UCS4 c = at(t, p);
            if (c == ')') break;
            if (c == '(' || c == '"' || c == '\n' || c == 0) return 0;
        }
    } else if (!scan_operand_names(t, p, &p)) {
        return 0;
    }
    line->operands_end = p;
    line->attrs = ++p;
    line->meta = line->meta_end = -1;
    while (at(t, p) == ',') {
        Py_ssize_t q = skip_blanks(t, p + 1);
        if (starts_with(t, q, "metadata=")) {
            if (line->meta >= 0 || !starts_with(t, q, "metadata={")) return 0;
            line->meta = q + 10;
            for (q += 10;;) {
                Py_UCS4 c = at(t, q);
                if (c == '"') {
                    q = scan_string(t, q);
                    if (q == NO) return 0;
                } else if (c == '{' || c == '}' || c == '\n' || c == 0) {
                    break;
                } else {
                    q++;
                }
            }
            if (at(t, q) != '}') return 0;
            line->meta_end = q++;
            Py_UCS4 next = at(t, q);
            if (next != 0 && next != ',' && !is_ascii_space(next)) return 0;
            p = q;
            continue;
        }
        if (!is_name_start(at(t, q))) return 0;
        while (is_name(at(t, q))) q++;
        if (at(t, q) != '=') return 0; /* no blank before it, as in `_FAST` */
        p = scan_value(t, skip_blanks(t, q + 1));
        if (p == NO) return 0;
    }
    line->attrs_end = p;
    while (is_blank(at(t, p)) || at(t, p) == '\r') p++;
    if (at(t, p) != '\n' && at(t, p) != 0) return 0;
    while (is_ascii_space(at(t, p))) p++;
    Py_UCS4 next = at(t, p);
    if (next == ',' || next == '/' || next >= 0x80 || (next >= 0x1c && next <= 0x1f)) return 0;
    line->end = p;
    return 1;
}

/* The operands (each the string of the instruction it names, where this call made that) and
 * their `#N` indices, as `_fast_operands` reads them. */
static int make_operands(Scan *scan, const Line *line, PyObject **operands, PyObject **indices) {
    const Text *t = &scan->t;
    *operands = *indices = NULL;
    if (line->literal || line->operands == line->operands_end) {
        *operands = PyTuple_New(0);
        *indices = PyTuple_New(0);
        return *operands && *indices ? 0 : -1;
    }
    PyObject *names = PyList_New(0), *numbers = NULL;
    if (!names) return -1;
    for (Py_ssize_t p = line->operands; p < line->operands_end;) {
        Py_UCS4 c = at(t, p);
        if (c == '/') { /* the `/ *index=N* /` comment: skipped */
            while (!(at(t, p) == '*' && at(t, p + 1) == '/')) p++;
            p += 2;
            continue;
        }
        if (c == '%' || c == ',' || is_blank(c)) {
            p++;
            continue;
        }
        Py_ssize_t start = p;
        while (is_name(at(t, p))) p++;
        Py_hash_t hash = span_hash(t, start, p);
        PyObject *name = table_get(&scan->names, t, start, p, hash);
        if (name) {
            Py_INCREF(name);
        } else {
            scan->unresolved++;
            name = PyUnicode_Substring(scan->text, start, p);
        }
        if (!name || PyList_Append(names, name) < 0) {
            Py_XDECREF(name);
            goto fail;
        }
        Py_DECREF(name);
        if (at(t, p) == '#' && !numbers) { /* the first index: None for the operands before */
            numbers = PyList_New(0);
            for (Py_ssize_t i = 0; numbers && i < PyList_GET_SIZE(names) - 1; i++)
                if (PyList_Append(numbers, Py_None) < 0) Py_CLEAR(numbers);
            if (!numbers) goto fail;
        }
        if (!numbers) continue;
        PyObject *number = Py_None;
        Py_INCREF(number);
        if (at(t, p) == '#') {
            Py_ssize_t digits = ++p;
            while (is_digit(at(t, p))) p++;
            PyObject *text = PyUnicode_Substring(scan->text, digits, p);
            Py_DECREF(number);
            number = text ? PyLong_FromUnicodeObject(text, 10) : NULL;
            Py_XDECREF(text);
        }
        if (!number || PyList_Append(numbers, number) < 0) {
            Py_XDECREF(number);
            goto fail;
        }
        Py_DECREF(number);
    }
    *operands = PyList_AsTuple(names);
    *indices = numbers ? PyList_AsTuple(numbers) : PyTuple_New(0);
    Py_DECREF(names);
    Py_XDECREF(numbers);
    return *operands && *indices ? 0 : -1;
fail:
    Py_DECREF(names);
    Py_XDECREF(numbers);
    return -1;
}

/* The Shape of the line's shape text (borrowed), read once per text in this call by the
 * caller's `shape_of(start, end)`; NULL with no exception set where that returns None (a
 * shape it does not read from its text alone): then the Python reader reads this line. */
static PyObject *shape_of(Scan *scan, const Line *line) {
    Py_hash_t hash = span_hash(&scan->t, line->shape, line->shape_end);
    if (hash < 0) return NULL; /* not kept in the table (not ASCII): the Python reader's */
    PyObject *shape = table_get(&scan->shapes, &scan->t, line->shape, line->shape_end, hash);
    if (shape) return shape;
    PyObject *made = PyObject_CallFunction(scan->shape_of, "nn", line->shape, line->shape_end);
    if (!made || made == Py_None) {
        Py_XDECREF(made);
        return NULL;
    }
    PyObject *text = PyUnicode_Substring(scan->text, line->shape, line->shape_end);
    shape = text && table_put(&scan->shapes, hash, text, made) == 0 ? made : NULL;
    Py_XDECREF(text);
    Py_DECREF(made); /* the table holds it */
    return shape;
}

/* Whether `word` is at p, all of it before `end`. */
static int word_at(const Text *t, Py_ssize_t p, Py_ssize_t end, const char *word) {
    Py_ssize_t n = (Py_ssize_t)strlen(word);
    return p + n <= end && starts_with(t, p, word);
}

/* `_reader.Reader._read_metadata` in C, for an ASCII text without `stack_frame_id` (whose
 * source is in the module's stack-frame tables, read by the caller): `op_name="..."` and
 * `source_file="..."` as written (escapes kept), `source_line=N`, anywhere in the text, the
 * last of each kept, as its regexes' `findall` finds them. A new (op_name, source_file,
 * source_line) tuple, or NULL with no exception set: the caller's `metadata_of` reads it. */
static PyObject *read_metadata(Scan *scan, Py_ssize_t start, Py_ssize_t end) {
    const Text *t = &scan->t;
    Py_ssize_t found[2][2] = {{-1, -1}, {-1, -1}}; /* op_name, source_file: inside the quotes */
    for (Py_ssize_t i = start; i < end;) {
        int which = word_at(t, i, end, "op_name=\"")       ? 0
                    : word_at(t, i, end, "source_file=\"") ? 1
                                                           : -1;
        if (which >= 0) {
            Py_ssize_t q = i + (which == 0 ? 9 : 13), close = NO;
            for (Py_ssize_t k = q; k < end; k++) {
                Py_UCS4 c = at(t, k);
                if (c == '"') {
                    close = k;
                    break;
                }
                if (c == '\\' && ++k >= end) break;
            }
            if (close != NO) {
                found[which][0] = q;
                found[which][1] = close;
                i = close + 1;
                continue;
            }
        }
        i++;
    }
    long long line = -1;
    for (Py_ssize_t i = start; i < end;) {
        int is_line = word_at(t, i, end, "source_line=");
        if (!is_line && word_at(t, i, end, "stack_frame_id=") && i + 15 < end &&
            is_digit(at(t, i + 15)))
            return NULL; /* its source is in the module's tables */
        Py_ssize_t d = i + 12;
        if (is_line && d < end && is_digit(at(t, d))) {
            long long value = 0; /* no overflow: `long_number` left longer ones to Python */
            for (; d < end && is_digit(at(t, d)); d++)
                value = value * 10 + (long long)(at(t, d) - '0');
            line = value;
            i = d;
            continue;
        }
        i++;
    }
    PyObject *fields[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 2; k++) {
        fields[k] = found[k][0] < 0 ? Py_NewRef(Py_None)
                                     : PyUnicode_Substring(scan->text, found[k][0], found[k][1]);
    }
    fields[2] = line < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(line);
    PyObject *meta = NULL;
    if (fields[0] && fields[1] && fields[2]) meta = PyTuple_Pack(3, fields[0], fields[1], fields[2]);
    for (int k = 0; k < 3; k++) Py_XDECREF(fields[k]);
    if (!meta && !PyErr_Occurred()) PyErr_NoMemory();
    return meta;
}

/* Whether a `source_line=` or `stack_frame_id=` in the span has more digits than surely fit
 * in int64 (as `_reader._META_INT` finds them: anywhere, strings included). */
static int long_number(const Text *t, Py_ssize_t start, Py_ssize_t end) {
    for (Py_ssize_t i = start; i < end; i++) {
        if (at(t, i) != 's') continue; /* both words' first letter: most characters end here */
        Py_ssize_t d = word_at(t, i, end, "source_line=")      ? i + 12
                       : word_at(t, i, end, "stack_frame_id=") ? i + 15
                                                               : NO;
        if (d == NO) continue;
        Py_ssize_t digits = d;
        while (d < end && is_digit(at(t, d))) d++;
        if (d - digits > INT64_DIGITS) return 1;
    }
    return 0;
}

/* (op_name, source_file, source_line) of the line's metadata (a new reference), read once per
 * metadata text in this call: by `read_metadata`, or else by the caller's `metadata_of`. NULL
 * with no exception set: a number there may not fit in int64, the Python reader reads the line
 * (and names it in its error). */
static PyObject *metadata_of(Scan *scan, const Line *line) {
    Py_hash_t hash = span_hash(&scan->t, line->meta, line->meta_end);
    PyObject *meta = table_get(&scan->metadata, &scan->t, line->meta, line->meta_end, hash);
    if (meta) {
        Py_INCREF(meta);
        return meta;
    }
    if (long_number(&scan->t, line->meta, line->meta_end)) return NULL;
    PyObject *inside = PyUnicode_Substring(scan->text, line->meta, line->meta_end);
    if (!inside) return NULL;
    meta = hash >= 0 ? read_metadata(scan, line->meta, line->meta_end) : NULL;
    if (!meta && !PyErr_Occurred()) {
        meta = PyObject_CallOneArg(scan->metadata_of, inside);
        if (meta && (!PyTuple_Check(meta) || PyTuple_GET_SIZE(meta) != 3)) {
            PyErr_SetString(PyExc_TypeError, "metadata_of must return a 3-tuple");
            Py_CLEAR(meta);
        }
    }
    if (meta && table_put(&scan->metadata, hash, inside, meta) < 0)
        Py_CLEAR(meta);
    Py_DECREF(inside);
    return meta;
}

/* The attributes of the line (a new reference): one `attributes` object per attribute text
 * in this call, shared by the instructions that print the same text (a read-only mapping). */
static PyObject *attributes_of(Scan *scan, const Line *line) {
    Py_hash_t hash = span_hash(&scan->t, line->attrs, line->attrs_end);
    PyObject *made =
        table_get(&scan->attributes_made, &scan->t, line->attrs, line->attrs_end, hash);
    if (made) {
        Py_INCREF(made);
        return made;
    }
    PyObject *rest = PyUnicode_Substring(scan->text, line->attrs, line->attrs_end);
    if (!rest) return NULL;
    made = PyObject_CallOneArg(scan->attributes, rest);
    if (made && table_put(&scan->attributes_made, hash, rest, made) < 0)
        Py_CLEAR(made);
    Py_DECREF(rest);
    return made;
}

/* The Instruction of a line read by `scan_line`: its fields in `Instruction`'s order. NULL
 * with no exception set: the shape is not in the cache yet, or a number in the metadata may
 * not fit in int64; the Python reader reads this line. */
static PyObject *make_instruction(Scan *scan, const Line *line, Py_ssize_t line_no) {
    PyObject *shape = shape_of(scan, line);
    if (!shape) return NULL;
    PyObject *fields[11] = {NULL};
    /* first: where the Python reader reads the line instead, nothing else is made yet (the
     * line's name would be among this body's names) */
    if (line->meta >= 0) {
        PyObject *meta = metadata_of(scan, line);
        if (!meta) return NULL;
        for (int i = 0; i < 3; i++) {
            fields[6 + i] = PyTuple_GET_ITEM(meta, i);
            Py_INCREF(fields[6 + i]);
        }
        Py_DECREF(meta);
    } else {
        for (int i = 0; i < 3; i++) {
            fields[6 + i] = Py_None;
            Py_INCREF(Py_None);
        }
    }
    fields[0] = span_object(scan, &scan->names, line->name, line->name_end);
    fields[1] = line->opcode;
    Py_INCREF(fields[1]);
    fields[2] = shape;
    Py_INCREF(shape);
    if (make_operands(scan, line, &fields[3], &fields[9]) < 0) goto fail;
    if (line->attrs_end > line->attrs) {
        fields[4] = attributes_of(scan, line);
    } else {
        fields[4] = scan->no_attributes;
        Py_INCREF(fields[4]);
    }
    fields[5] = PyBool_FromLong(line->root);
    fields[10] = PyLong_FromSsize_t(line_no);
    for (int i = 0; i < 11; i++)
        if (!fields[i]) goto fail;
    PyTypeObject *type = (PyTypeObject *)scan->instruction;
    PyObject *instr = type->tp_alloc(type, 11);
    if (!instr) goto fail;
    for (int i = 0; i < 11; i++) PyTuple_SET_ITEM(instr, i, fields[i]); /* steals */
    return instr;
fail:
    for (int i = 0; i < 11; i++) Py_XDECREF(fields[i]);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "scan_lines: a field was lost");
    return NULL;
}

/* Reads instruction lines from *pos into `out` until a line it does not take; *pos is then
 * at that line's first token, *line_no its line. -1: an error (set). */
static int read_lines(Scan *scan, PyObject *out, Py_ssize_t *pos, Py_ssize_t *line_no) {
    for (;;) {
        Line line = {0};
        int taken = scan_line(scan, *pos, &line);
        PyObject *instr = taken == 1 ? make_instruction(scan, &line, *line_no) : NULL;
        Py_XDECREF(line.opcode);
        if (!instr) return PyErr_Occurred() ? -1 : 0;
        int appended = PyList_Append(out, instr);
        Py_DECREF(instr);
        if (appended < 0) return -1;
        for (Py_ssize_t i = *pos; i < line.end; i++)
            if (at(&scan->t, i) == '\n') ++*line_no;
        *pos = line.end;
    }
}

/* The arguments both functions take, checked; 0, 1 for a text not read here (see `Text`), or
 * -1 with a TypeError. */
static int start_scan(Scan *scan, PyObject *const *args, Py_ssize_t nargs, const char *name,
                      Py_ssize_t *pos, Py_ssize_t *line_pos, Py_ssize_t *line_no) {
    if (nargs != 11) {
        PyErr_Format(PyExc_TypeError, "%s takes 11 arguments", name);
        return -1;
    }
    *scan = (Scan){
        .text = args[0], .out = args[4], .shape_of = args[5], .metadata_of = args[6],
        .instruction = args[7], .attributes = args[8], .no_attributes = args[9],
        .literal_opcodes = args[10],
    };
    *pos = PyLong_AsSsize_t(args[1]);
    *line_pos = PyLong_AsSsize_t(args[2]);
    *line_no = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred()) return -1;
    if (!PyUnicode_Check(scan->text) || !PyList_Check(scan->out) ||
        !PyCallable_Check(scan->shape_of) || !PyType_Check(scan->instruction) ||
        !PyType_IsSubtype((PyTypeObject *)scan->instruction, &PyTuple_Type) ||
        !PyAnySet_Check(scan->literal_opcodes)) {
        PyErr_Format(PyExc_TypeError, "%s: wrong argument types", name);
        return -1;
    }
#if PY_VERSION_HEX < 0x030C0000 /* from 3.12 every str is ready */
    if (PyUnicode_READY(scan->text) < 0) return -1;
#endif
    if (PyUnicode_KIND(scan->text) != PyUnicode_1BYTE_KIND) return 1; /* not read here */
    scan->t.chars = PyUnicode_1BYTE_DATA(scan->text);
    scan->t.n = PyUnicode_GET_LENGTH(scan->text);
    return 0;
}

/* One call of either function: its arguments checked, `read` run from `pos` (which leaves
 * `pos` where it stopped and `line_no` the line there), the call's tables emptied; the result
 * (pos, line_pos, line_no), or NULL on an error. */
static PyObject *run_scan(PyObject *const *args, Py_ssize_t nargs, const char *name,
                          int (*read)(Scan *, Py_ssize_t *, Py_ssize_t *)) {
    Scan scan;
    Py_ssize_t pos, line_pos, line_no;
    int started = start_scan(&scan, args, nargs, name, &pos, &line_pos, &line_no);
    if (started < 0) return NULL;
    if (started > 0 || pos < line_pos || pos > scan.t.n) /* nothing read: the caller goes on */
        return Py_BuildValue("nnn", pos, line_pos, line_no);
    for (Py_ssize_t i = line_pos; i < pos; i++)
        if (at(&scan.t, i) == '\n') line_no++;
    read(&scan, &pos, &line_no); /* an error is set on the scan's failure, found below */
    table_clear(&scan.names);
    table_clear(&scan.attributes_made);
    table_clear(&scan.metadata);
    table_clear(&scan.opcodes);
    table_clear(&scan.shapes);
    if (PyErr_Occurred()) return NULL;
    return Py_BuildValue("nnn", pos, pos, line_no);
}

PyDoc_STRVAR(scan_lines_doc,
"scan_lines(text, pos, line_pos, line_no, out, shape_of, metadata_of, instruction,\n"
"           attributes, no_attributes, literal_opcodes) -> (pos, line_pos, line_no)\n"
"\n"
"Appends to `out` an `instruction` for each line from `pos` in the one-line form XLA prints;\n"
"stops at the first line it does not take. `shape_of(start, end)`: the reader's Shape of\n"
"text[start:end], or None where it leaves that line to the Python reader; `metadata_of`: the\n"
"reader's (op_name, source_file, source_line) of a metadata text. `line_no` is the line of `line_pos`; returns where it stopped, and the line\n"
"there. See the file's opening comment.");

static int read_body_lines(Scan *scan, Py_ssize_t *pos, Py_ssize_t *line_no) {
    return read_lines(scan, scan->out, pos, line_no);
}

static PyObject *scan_lines(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    return run_scan(args, nargs, "scan_lines", read_body_lines);
}

/* White space from p, as far as `_WS` would skip it and no comment; the next token, or NO
 * (a comment, or a character the regex's \s may take: left to the Python reader). */
static Py_ssize_t skip_space(const Text *t, Py_ssize_t p, Py_ssize_t *line_no) {
    for (;; p++) {
        Py_UCS4 c = at(t, p);
        if (c == '\n') ++*line_no;
        else if (!is_ascii_space(c)) break;
    }
    Py_UCS4 next = at(t, p);
    return next == '/' || next >= 0x80 || (next >= 0x1c && next <= 0x1f) ? NO : p;
}

/* `[ENTRY] %name (params) -> shape {` on one line, as `_FAST_HEADER` reads it; 1 with the
 * name's span, whether it is the entry and the position after the line, or 0. */
static int scan_header(const Text *t, Py_ssize_t p, Py_ssize_t *name, Py_ssize_t *name_end,
                       int *is_entry, Py_ssize_t *body) {
    *is_entry = 0;
    if (starts_with(t, p, "ENTRY") && is_blank(at(t, p + 5))) {
        Py_ssize_t q = skip_blanks(t, p + 5);
        if (at(t, q) != '%' && !is_name_start(at(t, q))) return 0; /* `ENTRY (...)`: the regex */
        *is_entry = 1;
        p = q;
    }
    if (at(t, p) == '%') p++;
    if (!is_name_start(at(t, p))) return 0;
    *name = p;
    while (is_name(at(t, p))) p++;
    *name_end = p;
    p = skip_blanks(t, p);
    Py_ssize_t end = p; /* the line's end, then the `{` before its trailing blanks */
    while (at(t, end) != '\n' && at(t, end) != 0) end++;
    if (at(t, end) != '\n') return 0;
    *body = end + 1;
    while (end > p && (is_blank(at(t, end - 1)) || at(t, end - 1) == '\r')) end--;
    Py_ssize_t brace = end - 1;
    if (brace < p || at(t, brace) != '{') return 0;
    Py_UCS4 before = at(t, brace - 1);
    if (brace > p && at(t, p) != '(' && at(t, p) != '-') return 0; /* only blanks before it */
    return before == ' ' || before == '\t' || before == ')' || before == ']' || before == '}';
}

/* One computation from its header to the `}` that ends it, all of it in the one-line forms:
 * 1 with (name, is_entry, instructions, index, checked) appended to `out`, *pos at the next
 * token and *line_no its line; 0: not all of it (nothing appended); -1: an error. */
static int read_computation(Scan *scan, Py_ssize_t *pos, Py_ssize_t *line_no) {
    const Text *t = &scan->t;
    Py_ssize_t name, name_end, p, line = *line_no + 1; /* the body starts on the next line */
    int is_entry;
    if (!scan_header(t, *pos, &name, &name_end, &is_entry, &p)) return 0;
    p = skip_space(t, p, &line);
    if (p == NO) return 0;
    PyObject *instrs = PyList_New(0);
    if (!instrs) return -1;
    table_clear(&scan->names); /* operands name instructions of their own computation */
    scan->unresolved = 0;
    int done = read_lines(scan, instrs, &p, &line);
    if (done < 0 || at(t, p) != '}') {
        Py_DECREF(instrs);
        return done < 0 ? -1 : 0;
    }
    p = skip_space(t, p + 1, &line);
    if (p == NO || at(t, p) == ',') { /* `}, execution_thread=...`: the Python reader */
        Py_DECREF(instrs);
        return 0;
    }
    PyObject *tuple = PyList_AsTuple(instrs), *index = PyDict_New(), *item = NULL;
    Py_DECREF(instrs);
    if (!tuple || !index) goto fail;
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    for (Py_ssize_t i = 0; i < n; i++) { /* as `_index_of`: the last of a repeated name */
        PyObject *instr = PyTuple_GET_ITEM(tuple, i);
        if (PyDict_SetItem(index, PyTuple_GET_ITEM(instr, 0), instr) < 0) goto fail;
    }
    /* checked: no name twice, every operand one made before it in this body */
    int checked = PyDict_GET_SIZE(index) == n && scan->unresolved == 0;
    PyObject *name_text = PyUnicode_Substring(scan->text, name, name_end);
    if (!name_text) goto fail;
    item = Py_BuildValue("(NOOOO)", name_text, is_entry ? Py_True : Py_False, tuple, index,
                         checked ? Py_True : Py_False);
    if (!item || PyList_Append(scan->out, item) < 0) goto fail;
    Py_DECREF(item);
    Py_DECREF(tuple);
    Py_DECREF(index);
    *pos = p;
    *line_no = line;
    return 1;
fail:
    Py_XDECREF(item);
    Py_XDECREF(tuple);
    Py_XDECREF(index);
    return -1;
}

PyDoc_STRVAR(scan_computations_doc,
"scan_computations(text, pos, line_pos, line_no, out, shape_of, metadata_of, instruction,\n"
"                  attributes, no_attributes, literal_opcodes) -> (pos, line_pos, line_no)\n"
"\n"
"Reads whole computations from `pos` (a header's first token), each in the one-line forms XLA\n"
"prints, and appends (name, is_entry, instructions, index, checked) to `out` for each:\n"
"`index` maps names to instructions; `checked` is True when no name is repeated and every\n"
"operand names an instruction before it. Stops at the first computation it does not read\n"
"whole, a table, or the end. Other arguments as `scan_lines`.");

static int read_computations(Scan *scan, Py_ssize_t *pos, Py_ssize_t *line_no) {
    int done = 1;
    while (*pos < scan->t.n && (done = read_computation(scan, pos, line_no)) == 1) {
    }
    return done;
}

static PyObject *scan_computations(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    return run_scan(args, nargs, "scan_computations", read_computations);
}

static PyMethodDef methods[] = {
    {"scan_lines", (PyCFunction)(void (*)(void))scan_lines, METH_FASTCALL, scan_lines_doc},
    {"scan_computations", (PyCFunction)(void (*)(void))scan_computations, METH_FASTCALL,
     scan_computations_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_scan",
    .m_doc = "The reader's fast path in C (see scan_computations and scan_lines); the "
             "pure-Python reader does the rest.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module_def); }
