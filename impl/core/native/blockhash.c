/* impl.core._blockhash: a request's chained block hashes, serialised and digested in C.
 *
 * The compiled build's fast path for `impl.core.request_hasher` (blocks without extra keys).
 * A block's hash is H(serialise((parent, tuple(tokens), None))), serialised with pickle
 * (protocol 5) or canonical CBOR, digested with SHA-256 or a given digest function (XXH3-128 from
 * the `xxhash` package). `impl.core.token_runs` documents the bytes; this file writes the same
 * ones, block after block, without a Python object per token or per serialisation, and digests
 * SHA-256 with OpenSSL's libcrypto (SHA extensions where the CPU has them).
 *
 * hash_blocks(parent, tokens, start, size, cbor, digest) -> list[bytes]   (tokens: list or tuple)
 *   The hashes of the full blocks tokens[start:start+size], tokens[start+size:...], ... chained
 *   from `parent`. It stops early, before the first block it does not model (a token that is not
 *   an exact int in the encodings' range, a pickle with under 4 tokens, a parent of 256+ bytes,
 *   a pickle past one frame): the caller hashes the rest through the serialiser, so values never
 *   differ. digest None is SHA-256; else digest(bytes) -> bytes is called per block.
 */
#define PY_SSIZE_T_CLEAN
#define OPENSSL_API_COMPAT 10101 /* SHA256_Init & co: no provider lookup per digest */
#include <Python.h>
#include <openssl/sha.h>
#include <stdint.h>
#include <string.h>

enum {
    MIN_PICKLE_TOKENS = 4,          /* below this pickle writes TUPLE1..3 */
    MAX_PICKLE_FRAME = 65536 - 64,  /* the pickler starts a second frame near 64 KiB */
    FRAME_AT = 3,                   /* the frame length (u64 LE) follows PROTO 5, FRAME */
    MAX_PICKLE_PARENT = 255,        /* SHORT_BINBYTES */
    MAX_TOKEN_BYTES = 5,            /* the widest token encoding (tag + 4 bytes) */
    MAX_HEAD_BYTES = 9,             /* a CBOR head with an 8-byte length */
};

static const int64_t PICKLE_INT_LIMIT = INT64_C(1) << 31;
static const int64_t CBOR_INT_LIMIT = INT64_C(1) << 32;

/* The token's value when it is an exact int, else -1 (negative tokens are declined anyway).
 * Up to 3.11 an int is a sign-and-size plus 30-bit digits, read here directly (a third of
 * the encoding's time otherwise); later layouts go through the API. */
static inline int64_t token_value(PyObject *item) {
    if (!PyLong_CheckExact(item)) {
        return -1;
    }
#if PY_VERSION_HEX < 0x030C0000 && PYLONG_BITS_IN_DIGIT == 30
    const digit *digits = ((PyLongObject *)item)->ob_digit;
    switch (Py_SIZE(item)) {
    case 0:
        return 0;
    case 1:
        return (int64_t)digits[0];
    case 2:
        return (int64_t)digits[0] | ((int64_t)digits[1] << PyLong_SHIFT);
    default:
        return -1; /* negative, or 2**60 and up: outside every encoding here */
    }
#else
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(item, &overflow);
    return overflow ? -1 : (int64_t)value;
#endif
}

static inline unsigned char *put_le(unsigned char *out, uint64_t value, int width) {
    for (int i = 0; i < width; i++) {
        *out++ = (unsigned char)(value >> (8 * i));
    }
    return out;
}

static inline unsigned char *put_be(unsigned char *out, uint64_t value, int width) {
    for (int i = width - 1; i >= 0; i--) {
        *out++ = (unsigned char)(value >> (8 * i));
    }
    return out;
}

/* A CBOR head: major type (0x40 bytes, 0x80 array) with its length, shortest form. */
static unsigned char *cbor_head(unsigned char *out, unsigned char major, uint64_t length) {
    if (length < 24) {
        *out++ = (unsigned char)(major | length);
    } else if (length < 256) {
        *out++ = major | 24;
        *out++ = (unsigned char)length;
    } else if (length < 65536) {
        *out++ = major | 25;
        out = put_be(out, length, 2);
    } else if (length < (UINT64_C(1) << 32)) {
        *out++ = major | 26;
        out = put_be(out, length, 4);
    } else {
        *out++ = major | 27;
        out = put_be(out, length, 8);
    }
    return out;
}

/* pickle.dumps((parent, tuple(tokens[start:end]), None), 5) into `buf`: its length, or 0
 * when the pickler would write another form. */
static Py_ssize_t pickle_block(unsigned char *buf, const char *parent, Py_ssize_t parent_len,
                               PyObject **items, Py_ssize_t n) {
    static const unsigned char head[] = {0x80, 0x05, 0x95, 0, 0, 0, 0, 0, 0, 0, 0, 'C'};
    static const unsigned char tail[] = {'t', 0x94, 'N', 0x87, 0x94, '.'};
    if (n < MIN_PICKLE_TOKENS || parent_len > MAX_PICKLE_PARENT) {
        return 0;
    }
    unsigned char *out = buf;
    memcpy(out, head, sizeof head);
    out += sizeof head;
    *out++ = (unsigned char)parent_len;
    memcpy(out, parent, (size_t)parent_len);
    out += parent_len;
    *out++ = 0x94;
    *out++ = '(';
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t t = token_value(items[i]);
        if (t < 0 || t >= PICKLE_INT_LIMIT) {
            return 0;
        }
        if (t < 256) {
            *out++ = 0x4B;
            *out++ = (unsigned char)t;
        } else if (t < 65536) {
            *out++ = 0x4D;
            out = put_le(out, (uint64_t)t, 2);
        } else {
            *out++ = 0x4A;
            out = put_le(out, (uint64_t)t, 4);
        }
    }
    memcpy(out, tail, sizeof tail);
    out += sizeof tail;
    Py_ssize_t frame = (out - buf) - (FRAME_AT + 8);
    if (frame > MAX_PICKLE_FRAME) {
        return 0;
    }
    put_le(buf + FRAME_AT, (uint64_t)frame, 8);
    return out - buf;
}

/* cbor2.dumps((parent, tuple(tokens[start:end]), None), canonical=True) into `buf`: its
 * length, or 0 for a token outside 0 <= t < 2**32. */
static Py_ssize_t cbor_block(unsigned char *buf, const char *parent, Py_ssize_t parent_len,
                             PyObject **items, Py_ssize_t n) {
    unsigned char *out = buf;
    *out++ = 0x83;
    out = cbor_head(out, 0x40, (uint64_t)parent_len);
    memcpy(out, parent, (size_t)parent_len);
    out += parent_len;
    out = cbor_head(out, 0x80, (uint64_t)n);
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t t = token_value(items[i]);
        if (t < 0 || t >= CBOR_INT_LIMIT) {
            return 0;
        }
        if (t < 24) {
            *out++ = (unsigned char)t;
        } else if (t < 256) {
            *out++ = 0x18;
            *out++ = (unsigned char)t;
        } else if (t < 65536) {
            *out++ = 0x19;
            out = put_be(out, (uint64_t)t, 2);
        } else {
            *out++ = 0x1A;
            out = put_be(out, (uint64_t)t, 4);
        }
    }
    *out++ = 0xF6;
    return out - buf;
}

/* The block's hash: SHA-256 here, or digest(bytes) (a new reference, NULL with an error set). */
static PyObject *digest_block(const unsigned char *data, Py_ssize_t len, PyObject *digest) {
    if (digest == Py_None) {
        unsigned char md[SHA256_DIGEST_LENGTH];
        SHA256_CTX ctx;
        SHA256_Init(&ctx);
        SHA256_Update(&ctx, data, (size_t)len);
        SHA256_Final(md, &ctx);
        return PyBytes_FromStringAndSize((const char *)md, SHA256_DIGEST_LENGTH);
    }
    PyObject *serialised = PyBytes_FromStringAndSize((const char *)data, len);
    if (serialised == NULL) {
        return NULL;
    }
    PyObject *hash = PyObject_CallOneArg(digest, serialised);
    Py_DECREF(serialised);
    if (hash != NULL && !PyBytes_CheckExact(hash)) {
        PyErr_Format(PyExc_TypeError, "hash_blocks: digest returned %.80s, not bytes",
                     Py_TYPE(hash)->tp_name);
        Py_CLEAR(hash);
    }
    return hash;
}

static PyObject *hash_blocks(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "hash_blocks(parent, tokens, start, size, cbor, digest): 6 arguments");
        return NULL;
    }
    PyObject *parent = args[0], *tokens = args[1], *digest = args[5];
    Py_ssize_t start = PyLong_AsSsize_t(args[2]);
    Py_ssize_t size = PyLong_AsSsize_t(args[3]);
    int cbor = PyObject_IsTrue(args[4]);
    if ((start == -1 || size == -1 || cbor < 0) && PyErr_Occurred()) {
        return NULL;
    }
    if (!PyBytes_CheckExact(parent)
        || !(PyList_CheckExact(tokens) || PyTuple_CheckExact(tokens))) {
        PyErr_SetString(PyExc_TypeError,
                        "hash_blocks: parent must be bytes, tokens a list or a tuple");
        return NULL;
    }
    if (start < 0 || size < 1) {
        PyErr_Format(PyExc_ValueError, "hash_blocks: start %zd, size %zd", start, size);
        return NULL;
    }
    if (digest != Py_None && !PyCallable_Check(digest)) {
        PyErr_SetString(PyExc_TypeError, "hash_blocks: digest must be None or callable");
        return NULL;
    }
    PyObject *hashes = PyList_New(0);
    if (hashes == NULL) {
        return NULL;
    }
    Py_ssize_t widest = PyBytes_GET_SIZE(parent) > 64 ? PyBytes_GET_SIZE(parent) : 64;
    size_t capacity = (size_t)(16 + 2 * MAX_HEAD_BYTES + widest) + (size_t)size * MAX_TOKEN_BYTES;
    unsigned char *buf = PyMem_Malloc(capacity);
    if (buf == NULL) {
        Py_DECREF(hashes);
        return PyErr_NoMemory();
    }
    PyObject *chain = parent; /* borrowed: `parent`, then the last hash in `hashes` */
    while (start + size <= PySequence_Fast_GET_SIZE(tokens)) {
        PyObject **items = PySequence_Fast_ITEMS(tokens) + start;
        Py_ssize_t chain_len = PyBytes_GET_SIZE(chain);
        if (chain_len > widest) {
            break; /* a digest longer than the buffer was sized for: the serialiser's job */
        }
        const char *chain_data = PyBytes_AS_STRING(chain);
        Py_ssize_t len = cbor ? cbor_block(buf, chain_data, chain_len, items, size)
                              : pickle_block(buf, chain_data, chain_len, items, size);
        if (len == 0) {
            break;
        }
        PyObject *hash = digest_block(buf, len, digest);
        if (hash == NULL || PyList_Append(hashes, hash) < 0) {
            Py_XDECREF(hash);
            Py_CLEAR(hashes);
            break;
        }
        Py_DECREF(hash); /* the list holds it */
        chain = hash;
        start += size;
    }
    PyMem_Free(buf);
    return hashes;
}

static PyMethodDef methods[] = {
    {"hash_blocks", (PyCFunction)(void (*)(void))hash_blocks, METH_FASTCALL,
     "hash_blocks(parent, tokens, start, size, cbor, digest) -> list[bytes]: chained block "
     "hashes from tokens[start:], stopping before the first block not modelled here."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef blockhash_module = {
    PyModuleDef_HEAD_INIT, "_blockhash",
    "Chained block hashes serialised and digested in C (impl/core/native/blockhash.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__blockhash(void) { return PyModule_Create(&blockhash_module); }
