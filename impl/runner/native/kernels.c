/* vtwin's native CPU kernels: paged attention that reads the KV pages where they lie, writing
 * a step's keys and values into their slots, and a row-wise argmax.
 *
 * Plain C with no headers but libc's (and OpenMP pragmas), called through ctypes (impl/runner/native.py), so the
 * build is one compiler call of about a second and needs neither torch's headers nor ninja.
 * Compiled with -O3 -march=native -ffast-math: the dot products and the weighted sums of
 * values are reductions the compiler only vectorises when it may reassociate them, and expf
 * is only vectorised (glibc's libmvec) under fast math. Nothing here depends on NaN or
 * infinity semantics except argmax, which tests the bits instead of comparing floats.
 *
 * Cache layout (attention_metadata.head_major): [num_blocks][2 (K, V)][kv_heads][block][d],
 * fp32, contiguous, so one head's keys for one page are a contiguous [block][d] tile.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float dot(const float *restrict a, const float *restrict b, int64_t d) {
    float sum = 0.0f;
    for (int64_t i = 0; i < d; i++) sum += a[i] * b[i];
    return sum;
}

/* The first key position a query at `pos` sees: 0, or the start of its window or chunk. */
static inline int64_t first_visible(int64_t pos, int64_t window, int64_t chunk) {
    int64_t lo = 0;
    if (window > 0 && pos - window + 1 > lo) lo = pos - window + 1;
    if (chunk > 0 && pos / chunk * chunk > lo) lo = pos / chunk * chunk;
    return lo;
}

/* Ask for the cache lines of one [d] row ahead of use: the pages of a request are scattered,
 * so the hardware prefetcher only follows a page once its first lines missed. Each key (and
 * value) row read fetches the same row of the next page, a page ahead. */
static inline void prefetch_row(const float *row, int64_t d) {
    for (int64_t i = 0; i < d; i += 16) __builtin_prefetch(row + i, 0, 3);
}

/* Pointer to the [block][d] tile of K (kind 0) or V (kind 1) for KV head h of page `page`. */
static inline const float *tile_of(const float *cache, int32_t page, int kind, int64_t h,
                                   int64_t kv_heads, int64_t tile) {
    return cache + (((int64_t)page * 2 + kind) * kv_heads + h) * tile;
}

/* One query token of one request, all `group` query heads of KV head `h`: scores over keys
 * [lo, hi], softmax (max subtracted), then the probability-weighted sum of the values.
 * `scores` holds group * (hi - lo + 1) floats. Inlined per head size, so the dot products
 * and sums are fixed-length vector loops. */
static inline __attribute__((always_inline)) void attend_one(
        const float *restrict q, int64_t group, const float *restrict cache,
        const int32_t *restrict pages, int64_t h, int64_t kv_heads, int64_t block,
        const int64_t d, int64_t lo, int64_t hi, float scale, float *restrict scores,
        float *restrict out) {
    const int64_t n = hi - lo + 1, tile = block * d, last_page = hi / block;
    for (int kind = 0; kind < 2; kind++) {
        if (kind == 1) {
            for (int64_t g = 0; g < group; g++) {
                float *row = scores + g * n, top = row[0];
                for (int64_t j = 0; j < n; j++) {
                    row[j] *= scale;
                    top = row[j] > top ? row[j] : top;
                }
                float total = 0.0f;
                for (int64_t j = 0; j < n; j++) {
                    row[j] = expf(row[j] - top);
                    total += row[j];
                }
                const float inverse = 1.0f / total;
                for (int64_t j = 0; j < n; j++) row[j] *= inverse;
                memset(out + g * d, 0, (size_t)d * sizeof(float));
            }
        }
        for (int64_t p = lo / block; p <= last_page; p++) {
            const float *rows = tile_of(cache, pages[p], kind, h, kv_heads, tile);
            const float *next = p < last_page
                ? tile_of(cache, pages[p + 1], kind, h, kv_heads, tile) : NULL;
            const int64_t base = p * block;
            const int64_t start = lo > base ? lo - base : 0;
            const int64_t stop = hi - base + 1 < block ? hi - base + 1 : block;
            for (int64_t t = start; t < stop; t++) {
                if (next != NULL) prefetch_row(next + t * d, d);
                const float *row = rows + t * d;
                const int64_t j = base + t - lo;
                for (int64_t g = 0; g < group; g++) {
                    if (kind == 0) {
                        scores[g * n + j] = dot(q + g * d, row, d);
                    } else {
                        const float weight = scores[g * n + j];
                        float *o = out + g * d;
                        for (int64_t i = 0; i < d; i++) o[i] += weight * row[i];
                    }
                }
            }
        }
    }
}

/* attend_one with the head size a constant where it is a common one. */
static void attend(const float *q, int64_t group, const float *cache, const int32_t *pages,
                   int64_t h, int64_t kv_heads, int64_t block, int64_t d, int64_t lo,
                   int64_t hi, float scale, float *scores, float *out) {
    switch (d) {
    case 64:
        attend_one(q, group, cache, pages, h, kv_heads, block, 64, lo, hi, scale, scores, out);
        break;
    case 128:
        attend_one(q, group, cache, pages, h, kv_heads, block, 128, lo, hi, scale, scores, out);
        break;
    default:
        attend_one(q, group, cache, pages, h, kv_heads, block, d, lo, hi, scale, scores, out);
    }
}

/* Attention for a flat batch: request r owns query rows query_start[r]..query_start[r+1],
 * the last tokens of its seq_lens[r]; query and out are [tokens][heads][d]; block_table rows
 * are table_stride apart, table_cols pages used. Requests are shared among `threads` OpenMP
 * threads (torch's own runtime: torch loads libgomp.so.1 first, so this library binds to
 * it). Returns 0; -1 when a request's sequence exceeds its block table row or the heads are
 * not a multiple of the KV heads; -2 when scratch memory cannot be had. */
int vtwin_paged_attention_f32(const float *query, const float *cache, const int32_t *block_table,
                              int64_t table_cols, int64_t table_stride,
                              const int32_t *query_start, const int32_t *seq_lens,
                              int64_t num_reqs, int64_t heads, int64_t kv_heads, int64_t block,
                              int64_t d, float scale, int64_t window, int64_t chunk,
                              int64_t threads, float *out) {
    const int64_t group = heads / kv_heads;
    if (kv_heads <= 0 || group * kv_heads != heads) return -1;
    int64_t longest = 1;
    for (int64_t r = 0; r < num_reqs; r++) longest = seq_lens[r] > longest ? seq_lens[r] : longest;
    if (longest > table_cols * block) return -1;
    int status = 0;
    #pragma omp parallel num_threads(threads > 1 && num_reqs > 1 ? threads : 1)
    {
        float *scores = malloc((size_t)(group * longest) * sizeof(float));
        if (scores == NULL) {
            #pragma omp atomic write
            status = -2;
        }
        #pragma omp for schedule(dynamic, 1)
        for (int64_t r = 0; r < num_reqs; r++) {
            if (scores == NULL) continue;
            const int64_t first = query_start[r], count = query_start[r + 1] - first;
            const int32_t *pages = block_table + r * table_stride;
            for (int64_t i = 0; i < count; i++) {
                const int64_t pos = seq_lens[r] - count + i;
                const int64_t lo = first_visible(pos, window, chunk);
                for (int64_t h = 0; h < kv_heads; h++) {
                    const int64_t row = ((first + i) * heads + h * group) * d;
                    attend(query + row, group, cache, pages, h, kv_heads, block, d, lo, pos,
                           scale, scores, out + row);
                }
            }
        }
        free(scores);
    }
    return status;
}

/* key, value: [tokens][kv_heads][d]; slot s is block s / block_size, offset s % block_size. */
void vtwin_write_kv_f32(const float *key, const float *value, const int64_t *slots,
                        int64_t tokens, int64_t kv_heads, int64_t block, int64_t d,
                        float *cache) {
    const int64_t tile = block * d;
    for (int64_t t = 0; t < tokens; t++) {
        const int64_t b = slots[t] / block, offset = slots[t] % block;
        for (int64_t h = 0; h < kv_heads; h++) {
            const int64_t src = (t * kv_heads + h) * d;
            memcpy(cache + (b * 2 * kv_heads + h) * tile + offset * d, key + src,
                   (size_t)d * sizeof(float));
            memcpy(cache + ((b * 2 + 1) * kv_heads + h) * tile + offset * d, value + src,
                   (size_t)d * sizeof(float));
        }
    }
}

static inline int is_nan(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return (bits & 0x7fffffffu) > 0x7f800000u;
}

/* Per row of x ([rows][cols], rows `stride` floats apart): the index of the first maximum,
 * or of the first NaN if the row has one (torch.argmax's answer). */
void vtwin_argmax_rows_f32(const float *x, int64_t rows, int64_t cols, int64_t stride,
                           int64_t *out) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * stride;
        int64_t found = -1;
        int nan_seen = 0;
        for (int64_t i = 0; i < cols; i++) nan_seen |= is_nan(row[i]);
        if (nan_seen) {
            for (int64_t i = 0; i < cols && found < 0; i++)
                if (is_nan(row[i])) found = i;
        } else {
            float top = row[0];
            for (int64_t i = 1; i < cols; i++) top = row[i] > top ? row[i] : top;
            for (int64_t i = 0; i < cols && found < 0; i++)
                if (row[i] == top) found = i;
        }
        out[r] = found < 0 ? 0 : found;
    }
}
