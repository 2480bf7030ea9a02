/* Engine file writing and reading: header, page-aligned section table, per-section xxHash3
 * (Debian's libxxhash), bounds-checked parsing. A file for another target or format version, or a
 * damaged one, is refused with a message that says which. Loading from files: engine_load.c. */
#include "engine.h"
#include "bytes.h"
#include "graph_ser.h"
#include "../core/devtac.h"
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <xxhash.h>

#define MAX_SECTIONS 32

uint32_t kiln__host_isa(void)
{
    uint32_t isa = 0;
#if defined(__x86_64__)
    isa |= KILN_ISA_X86_64;
    if (kiln__cpu_has(KILN_CPU_AVX2_FMA))
        isa |= KILN_ISA_AVX2;
    if (kiln__cpu_has(KILN_CPU_AVX512F))
        isa |= KILN_ISA_AVX512;
#endif
    return isa;
}

static uint64_t checksum(const uint8_t *p, size_t n) { return (uint64_t)XXH3_64bits(p, n); }

void kiln__engine_free_profiles(struct kiln_engine *e)
{
    for (int p = 0; p < e->n_profiles; p++) {
        kiln_profile_dims *pd = &e->profiles[p];
        for (int i = 0; i < pd->n_inputs; i++)
            kiln__free(pd->names[i]);
        kiln__free(pd->names);
        kiln__free(pd->ndim);
        kiln__free(pd->min);
        kiln__free(pd->opt);
        kiln__free(pd->max);
    }
    kiln__free(e->profiles);
    e->profiles = NULL;
    e->n_profiles = 0;
}

static void write_profiles(kiln_wbuf *w, const struct kiln_engine *e)
{
    kiln__w_u32(w, (uint32_t)e->n_profiles);
    for (int p = 0; p < e->n_profiles; p++) {
        const kiln_profile_dims *pd = &e->profiles[p];
        kiln__w_u32(w, (uint32_t)pd->n_inputs);
        for (int i = 0; i < pd->n_inputs; i++) {
            kiln__w_str(w, pd->names[i]);
            kiln__w_i32(w, pd->ndim[i]);
            for (int d = 0; d < pd->ndim[i]; d++) {
                kiln__w_i64(w, pd->min[i][d]);
                kiln__w_i64(w, pd->opt[i][d]);
                kiln__w_i64(w, pd->max[i][d]);
            }
        }
    }
}

static kiln_status read_profiles(kiln_rbuf *r, struct kiln_engine *e)
{
    uint32_t np = kiln__r_count(r, 4, 1024);
    if (r->bad)
        goto bad;
    e->profiles = kiln__calloc(np + 1, sizeof *e->profiles);
    if (!e->profiles)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (uint32_t p = 0; p < np; p++) {
        kiln_profile_dims *pd = &e->profiles[p];
        e->n_profiles = (int)p + 1;
        uint32_t ni = kiln__r_count(r, 8, 65536);
        if (r->bad)
            goto bad;
        pd->names = kiln__calloc(ni + 1, sizeof(char *));
        pd->ndim = kiln__calloc(ni + 1, sizeof(int));
        pd->min = kiln__calloc(ni + 1, sizeof *pd->min);
        pd->opt = kiln__calloc(ni + 1, sizeof *pd->opt);
        pd->max = kiln__calloc(ni + 1, sizeof *pd->max);
        if (!pd->names || !pd->ndim || !pd->min || !pd->opt || !pd->max)
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        for (uint32_t i = 0; i < ni; i++) {
            pd->n_inputs = (int)i + 1;
            pd->names[i] = kiln__r_str(r);
            pd->ndim[i] = kiln__r_i32(r);
            if (r->bad || !pd->names[i] || pd->ndim[i] < 0 || pd->ndim[i] > KILN_MAX_DIMS)
                goto bad;
            for (int d = 0; d < pd->ndim[i]; d++) {
                pd->min[i][d] = kiln__r_i64(r);
                pd->opt[i][d] = kiln__r_i64(r);
                pd->max[i][d] = kiln__r_i64(r);
                if (pd->min[i][d] < 0 || pd->min[i][d] > pd->opt[i][d] || pd->opt[i][d] > pd->max[i][d])
                    goto bad;
            }
        }
    }
    if (!r->bad)
        return KILN_OK;
bad:
    if (r->oom)
        return kiln__err(KILN_ERR_NOMEM, "out of memory reading the engine's optimization profiles");
    return kiln__err(KILN_ERR_PARSE, "corrupted engine: invalid optimization profile section");
}

static void write_plan(kiln_wbuf *w, const struct kiln_engine *e)
{
    kiln__w_u32(w, (uint32_t)e->plan_n_inputs);
    for (int i = 0; i < e->plan_n_inputs; i++) {
        kiln__w_i32(w, e->plan_ndim[i]);
        for (int d = 0; d < e->plan_ndim[i]; d++)
            kiln__w_i64(w, e->plan_dims[i][d]);
    }
    const kiln_plan *p = &e->plan;
    kiln__w_u64(w, p->arena_size);
    kiln__w_u64(w, p->naive_bytes);
    kiln__w_u32(w, (uint32_t)p->n_planned);
    kiln__w_u32(w, (uint32_t)p->n_inplace);
    kiln__w_u32(w, (uint32_t)p->n_values);
    for (int v = 0; v < p->n_values; v++) {
        kiln__w_i64(w, p->offset[v]);
        kiln__w_u64(w, p->cap[v]);
        kiln__w_u8(w, p->inplace[v]);
    }
}

/* The plan must match the graph (one entry per value) and keep every slot inside the arena. A
 * planned slot holds at least one byte (the planner never plans empty values): the runtime tells
 * arena tensors from heap tensors by address, and an empty slot at the arena's end (or in an empty
 * arena) would make an arena address look like a heap allocation that is then freed. */
static kiln_status read_plan(kiln_rbuf *r, struct kiln_engine *e)
{
    const kiln_graph *g = e->g;
    uint32_t ni = kiln__r_count(r, 4, KILN_MAX_CALIB_INPUTS);
    if (r->bad || (int)ni != g->n_inputs)
        goto bad;
    e->plan_ndim = kiln__calloc(ni + 1, sizeof(int));
    e->plan_dims = kiln__calloc(ni + 1, sizeof *e->plan_dims);
    if (!e->plan_ndim || !e->plan_dims)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    e->plan_n_inputs = (int)ni;
    for (uint32_t i = 0; i < ni; i++) {
        e->plan_ndim[i] = kiln__r_i32(r);
        if (e->plan_ndim[i] < 0 || e->plan_ndim[i] > KILN_MAX_DIMS)
            goto bad;
        for (int d = 0; d < e->plan_ndim[i]; d++)
            if ((e->plan_dims[i][d] = kiln__r_i64(r)) < 0)
                goto bad;
    }
    kiln_plan *p = &e->plan;
    p->arena_size = (size_t)kiln__r_u64(r);
    p->naive_bytes = (size_t)kiln__r_u64(r);
    p->n_planned = (int)kiln__r_u32(r);
    p->n_inplace = (int)kiln__r_u32(r);
    uint32_t nv = kiln__r_count(r, 17, 100000000u);
    if (r->bad || (int)nv != g->n_values || p->arena_size > kiln__max_tensor_bytes())
        goto bad;
    p->n_values = (int)nv;
    p->offset = kiln__calloc(nv + 1, sizeof(int64_t));
    p->cap = kiln__calloc(nv + 1, sizeof(size_t));
    p->inplace = kiln__calloc(nv + 1, 1);
    if (!p->offset || !p->cap || !p->inplace)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (uint32_t v = 0; v < nv; v++) {
        p->offset[v] = kiln__r_i64(r);
        p->cap[v] = (size_t)kiln__r_u64(r);
        p->inplace[v] = kiln__r_u8(r);
        if (r->bad || p->offset[v] < -1 || p->inplace[v] > KILN_SLOT_CONCAT ||
            (p->offset[v] >= 0 && (p->cap[v] == 0 || p->cap[v] > p->arena_size ||
                                   (uint64_t)p->offset[v] > p->arena_size - p->cap[v])))
            goto bad;
    }
    if (r->bad || r->pos != r->len)
        goto bad;
    KILN_TRY(kiln__plan_validate(g, p));   /* slots that overlap would corrupt outputs silently */
    e->has_plan = true;
    return KILN_OK;
bad:
    return kiln__err(KILN_ERR_PARSE, "corrupted engine: invalid memory plan section");
}

typedef struct sec_out {
    uint32_t kind;
    kiln_wbuf *b;
} sec_out;

kiln_status kiln_engine_serialize(kiln_engine_t e, void **out, size_t *out_len)
{
    if (!e || !out || !out_len)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_serialize: NULL argument");
    kiln_wbuf sec[5] = {{0}}, weights = {0}, packed = {0}, file = {0};
    kiln_status st = KILN_OK;
    kiln__w_bytes(&sec[0], e->manifest ? e->manifest : "{}", strlen(e->manifest ? e->manifest : "{}"));
    st = kiln__graph_write(&sec[1], &weights, e->g);
    write_profiles(&sec[2], e);
    if (e->has_plan)
        write_plan(&sec[3], e);
    if (e->n_layers) {
        kiln__layers_write(&sec[4], e);
        kiln__w_bytes(&packed, e->packed, e->packed_len);
    }
    if (st != KILN_OK)
        goto done;
    kiln_wbuf tac = {0};
    if (e->dev_tactics)
        kiln__w_bytes(&tac, e->dev_tactics, e->dev_tactics_len);
    sec_out secs[8] = {
        {KILN_SEC_MANIFEST, &sec[0]}, {KILN_SEC_GRAPH, &sec[1]}, {KILN_SEC_WEIGHTS, &weights},
        {KILN_SEC_PROFILES, &sec[2]}};
    uint32_t ns = 4;
    if (e->has_plan)
        secs[ns++] = (sec_out){KILN_SEC_PLAN, &sec[3]};
    if (e->n_layers) {
        secs[ns++] = (sec_out){KILN_SEC_LAYERS, &sec[4]};
        secs[ns++] = (sec_out){KILN_SEC_PACKED, &packed};
    }
    if (e->dev_tactics)
        secs[ns++] = (sec_out){KILN_SEC_DEVICE_TACTICS, &tac};
    /* header */
    kiln__w_bytes(&file, KILN_ENGINE_MAGIC, 8);
    kiln__w_u32(&file, KILN_ENGINE_FORMAT_VERSION);
    kiln__w_u32(&file, KILN_ENGINE_HEADER_BYTES);
    char ver[16] = {0};
    snprintf(ver, sizeof ver, "%s", KILN_VERSION_STRING);
    kiln__w_bytes(&file, ver, 16);
    kiln__w_u32(&file, e->target_kind);
    kiln__w_u32(&file, e->target_arch);
    kiln__w_u32(&file, ns);
    kiln__w_u32(&file, KILN_ENGINE_SECTION_ALIGN);
    kiln__w_u64(&file, KILN_ENGINE_HEADER_BYTES);   /* section table follows the header */
    size_t size_at = file.len;
    kiln__w_u64(&file, 0);                          /* file size, patched below */
    /* section table, then page-aligned sections (the WEIGHTS section is mapped and used in place) */
    size_t table_at = file.len;
    for (uint32_t i = 0; i < ns; i++) {
        kiln__w_u32(&file, secs[i].kind);
        kiln__w_u32(&file, 0);
        kiln__w_u64(&file, 0);
        kiln__w_u64(&file, secs[i].b->len);
        kiln__w_u64(&file, checksum(secs[i].b->p, secs[i].b->len));
    }
    for (uint32_t i = 0; i < ns; i++) {
        kiln__w_align(&file, KILN_ENGINE_SECTION_ALIGN);
        size_t off = file.len;
        kiln__w_bytes(&file, secs[i].b->p, secs[i].b->len);
        if (!file.oom)
            for (int k = 0; k < 8; k++)
                file.p[table_at + i * 32 + 8 + k] = (uint8_t)((uint64_t)off >> (8 * k));
    }
    if (file.oom || sec[0].oom || sec[1].oom || sec[2].oom || sec[3].oom || sec[4].oom || weights.oom || packed.oom ||
        tac.oom) {
        st = kiln__err(KILN_ERR_NOMEM, "out of memory serializing engine");
        goto done;
    }
    for (int k = 0; k < 8; k++)
        file.p[size_at + (size_t)k] = (uint8_t)((uint64_t)file.len >> (8 * k));
    *out = file.p;
    *out_len = file.len;
    file.p = NULL;
done:
    for (int i = 0; i < 5; i++)
        kiln__w_free(&sec[i]);
    kiln__w_free(&weights);
    kiln__w_free(&packed);
    kiln__w_free(&tac);
    kiln__w_free(&file);
    return st;
}

kiln_status kiln_engine_save(kiln_engine_t e, const char *path)
{
    if (!e || !path)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_save: NULL %s", !e ? "engine" : "path");
    void *buf;
    size_t len;
    KILN_TRY(kiln_engine_serialize(e, &buf, &len));
    /* never in place: a failed or concurrent save must not leave a partial engine at `path` */
    kiln_status st = kiln__write_file_atomic(path, buf, len);
    kiln__free(buf);
    return st;
}

static const char *sec_name(uint32_t k)
{
    switch (k) {
    case KILN_SEC_MANIFEST: return "manifest";
    case KILN_SEC_GRAPH: return "graph";
    case KILN_SEC_WEIGHTS: return "weights";
    case KILN_SEC_PROFILES: return "profiles";
    case KILN_SEC_PLAN: return "plan";
    case KILN_SEC_LAYERS: return "layers";
    case KILN_SEC_PACKED: return "packed";
    case KILN_SEC_DEVICE_TACTICS: return "device tactics";
    default: return "unknown";
    }
}

/* The names of ISA bits, for "engine needs CPU features this machine lacks (...)"; bits kiln does
 * not know (a newer kiln's, or a damaged field) by value. */
static const char *isa_names(uint32_t bits, char *buf, size_t len)
{
    uint32_t known = KILN_ISA_X86_64 | KILN_ISA_AVX2 | KILN_ISA_AVX512;
    snprintf(buf, len, "%s%s%s", bits & KILN_ISA_X86_64 ? "x86-64 " : "", bits & KILN_ISA_AVX2 ? "AVX2+FMA " : "",
             bits & KILN_ISA_AVX512 ? "AVX-512 " : "");
    size_t n = strlen(buf);
    if (bits & ~known)
        snprintf(buf + n, len - n, "unknown bits 0x%x ", bits & ~known);
    n = strlen(buf);
    if (n)
        buf[n - 1] = 0;   /* the trailing space */
    return buf;
}

typedef struct section_table {
    kiln_rbuf sec[9];    /* by kind (1..8) */
    bool have[9];
    uint32_t target_kind, target_arch;
} section_table;

static kiln_status check_header(kiln_rbuf *h, size_t len, uint32_t *ns, uint32_t *arch)
{
    char magic[8];
    kiln__r_bytes(h, magic, 8);
    if (h->bad || memcmp(magic, KILN_ENGINE_MAGIC, 8) != 0)
        return kiln__err(KILN_ERR_PARSE, "not a kiln engine file (bad magic)");
    uint32_t version = kiln__r_u32(h), hbytes = kiln__r_u32(h);
    kiln__r_bytes(h, NULL, 16);   /* kiln version that built it (informative) */
    uint32_t tkind = kiln__r_u32(h), tarch = kiln__r_u32(h);
    *arch = tarch;
    *ns = kiln__r_u32(h);
    uint32_t align = kiln__r_u32(h);
    uint64_t table = kiln__r_u64(h), fsize = kiln__r_u64(h);
    if (h->bad)
        return kiln__err(KILN_ERR_PARSE, "engine file is truncated (%zu bytes, header incomplete)", len);
    if (version < KILN_ENGINE_FORMAT_MIN_READ || version > KILN_ENGINE_FORMAT_VERSION)
        return kiln__err(KILN_ERR_UNSUPPORTED,
                         "engine format version %u is not supported by this kiln (%s reads versions %u-%u); rebuild the "
                         "engine from its model with this kiln (`kiln build`)",
                         version, KILN_VERSION_STRING, KILN_ENGINE_FORMAT_MIN_READ, KILN_ENGINE_FORMAT_VERSION);
    if (fsize != len)
        return kiln__err(KILN_ERR_PARSE, "engine file is truncated or padded: header says %llu bytes, file has %zu",
                         (unsigned long long)fsize, len);
    if (hbytes != KILN_ENGINE_HEADER_BYTES || table != KILN_ENGINE_HEADER_BYTES || *ns == 0 || *ns > MAX_SECTIONS ||
        align != KILN_ENGINE_SECTION_ALIGN)
        return kiln__err(KILN_ERR_PARSE, "corrupted engine: invalid header");
    if (tkind != KILN_TARGET_CPU)
        return kiln__err(KILN_ERR_UNSUPPORTED, "engine was built for target %s (arch %u), not for this CPU runtime",
                         tkind == KILN_TARGET_CUDA ? "CUDA" : "unknown", tarch);
    uint32_t missing = tarch & ~kiln__host_isa();
    char names[96];
    if (missing)
        return kiln__err(KILN_ERR_UNSUPPORTED, "engine needs CPU features this machine lacks (%s)",
                         isa_names(missing, names, sizeof names));
    return KILN_OK;
}

/* Every byte outside the header, the table and the sections is alignment padding and must be
 * zero, so that no byte of the file escapes the checks. Sections do not overlap (checked). */
static bool padding_is_zero(const uint8_t *buf, size_t len, size_t pos, const uint64_t *off, const uint64_t *size,
                            uint32_t ns)
{
    for (;;) {
        size_t next = len, next_end = len;   /* the first non-empty section at or after pos */
        for (uint32_t i = 0; i < ns; i++)
            if (size[i] && off[i] >= pos && off[i] < next)
                next = (size_t)off[i], next_end = (size_t)(off[i] + size[i]);
        for (size_t k = pos; k < next; k++)
            if (buf[k])
                return false;
        if (next == len)
            return true;
        pos = next_end;
    }
}

/* Header and section table: every section page-aligned, after the table, inside the file, not
 * overlapping another, and matching its checksum, before any of its bytes is interpreted. */
static kiln_status read_section_table(const uint8_t *buf, size_t len, section_table *st)
{
    memset(st, 0, sizeof *st);
    kiln_rbuf h = {.p = buf, .len = len, .what = "header"};
    uint32_t ns = 0;
    KILN_TRY(check_header(&h, len, &ns, &st->target_arch));
    st->target_kind = KILN_TARGET_CPU;   /* the only kind check_header accepts */
    size_t table_end = KILN_ENGINE_HEADER_BYTES + (size_t)ns * 32;
    uint64_t off[MAX_SECTIONS], size[MAX_SECTIONS];
    kiln_rbuf t = {.p = buf, .len = len, .pos = KILN_ENGINE_HEADER_BYTES, .what = "section table"};
    for (uint32_t i = 0; i < ns; i++) {
        uint32_t kind = kiln__r_u32(&t);
        kiln__r_u32(&t);
        off[i] = kiln__r_u64(&t);
        size[i] = kiln__r_u64(&t);
        uint64_t sum = kiln__r_u64(&t);
        if (t.bad)
            return kiln__err(KILN_ERR_PARSE, "engine file is truncated (section table incomplete)");
        if (off[i] > len || size[i] > len - off[i])
            return kiln__err(KILN_ERR_PARSE, "engine file is truncated or corrupted: %s section lies outside the file",
                             sec_name(kind));
        if (off[i] % KILN_ENGINE_SECTION_ALIGN || off[i] < table_end)
            return kiln__err(KILN_ERR_PARSE, "corrupted engine: %s section is misplaced (offset %llu)", sec_name(kind),
                             (unsigned long long)off[i]);
        for (uint32_t j = 0; j < i; j++)
            if (size[i] && size[j] && off[i] < off[j] + size[j] && off[j] < off[i] + size[i])
                return kiln__err(KILN_ERR_PARSE, "corrupted engine: %s section overlaps another section", sec_name(kind));
        if (checksum(buf + off[i], (size_t)size[i]) != sum)
            return kiln__err(KILN_ERR_PARSE, "engine file is corrupted: checksum mismatch in the %s section",
                             sec_name(kind));
        if (kind >= 1 && kind <= 8) {
            if (st->have[kind])
                return kiln__err(KILN_ERR_PARSE, "corrupted engine: duplicate %s section", sec_name(kind));
            st->have[kind] = true;
            st->sec[kind] = (kiln_rbuf){.p = buf + off[i], .len = (size_t)size[i], .what = sec_name(kind)};
        }
    }
    if (!padding_is_zero(buf, len, table_end, off, size, ns))
        return kiln__err(KILN_ERR_PARSE, "engine file is corrupted: non-zero bytes in the padding between sections");
    if (!st->have[KILN_SEC_GRAPH] || !st->have[KILN_SEC_WEIGHTS] || !st->have[KILN_SEC_MANIFEST] ||
        st->have[KILN_SEC_LAYERS] != st->have[KILN_SEC_PACKED])
        return kiln__err(KILN_ERR_PARSE, "corrupted engine: a required section is missing");
    return KILN_OK;
}

/* One allocation holding copies of the WEIGHTS and PACKED sections, each start aligned like the
 * mapped file's blobs (no memset: every byte is copied over). */
static kiln_status copy_weights(struct kiln_engine *e, kiln_rbuf *w, kiln_rbuf *pk)
{
    size_t a = KILN_ENGINE_BLOB_ALIGN, wl = (w->len + a - 1) / a * a;
    if (w->len > SIZE_MAX / 4 || pk->len > SIZE_MAX / 4)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    e->backing = kiln__malloc(wl + pk->len + a);
    if (!e->backing)
        return kiln__err(KILN_ERR_NOMEM, "out of memory copying %zu bytes of engine weights", w->len + pk->len);
    e->backing_len = wl + pk->len + a;
    uint8_t *p = (uint8_t *)e->backing + (a - (uintptr_t)e->backing % a) % a;
    if (w->len)
        memcpy(p, w->p, w->len);
    if (pk->len)
        memcpy(p + wl, pk->p, pk->len);
    w->p = p;
    pk->p = p + wl;
    return KILN_OK;
}

/* DEVICE_TACTICS: a tactics text (its first line checked here; the device module reads the rest, skipping malformed
 * lines), copied out of the file's bytes */
static kiln_status read_tactics(const kiln_rbuf *r, struct kiln_engine *e)
{
    char sig[8];
    if (r->len > KILN_ENGINE_MAX_TACTICS || memchr(r->p, '\0', r->len) ||
        !kiln__devtac_text_signature((const char *)r->p, r->len, sig, sizeof sig))
        return kiln__err(KILN_ERR_PARSE, "corrupted engine: device tactics section: invalid text");
    if (!(e->dev_tactics = kiln__strndup((const char *)r->p, r->len)))
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    e->dev_tactics_len = r->len;
    return KILN_OK;
}

/* The header's target arch is not checksummed: what the layers holding weights stored only packed
 * need is read again from their blobs (checksummed PACKED bytes), so that an edited header cannot
 * make a host run layers prepared for features it lacks. */
static kiln_status check_packed_isa(struct kiln_engine *e)
{
    uint32_t need = kiln__engine_packed_isa(e), missing = need & ~kiln__host_isa();
    char names[96];
    if (missing)
        return kiln__err(KILN_ERR_UNSUPPORTED,
                         "engine needs CPU features this machine lacks (%s): it stores weights only in layouts "
                         "prepared for them%s",
                         isa_names(missing, names, sizeof names),
                         (e->target_arch & need) != need ? " (its header, which does not list them, was altered)" : "");
    e->target_arch |= need;
    return KILN_OK;
}

/* The section table has no checksum, and a section of an unknown kind is skipped: a bit flip in the PROFILES entry's
 * kind dropped the engine's profiles (any shape then ran). The checksummed manifest records how many the build made
 * ("options": {"profiles": N}): the profiles read must be as many (a manifest without the count: not checked). */
static kiln_status check_manifest_profiles(const struct kiln_engine *e)
{
    json_t *root = json_loads(e->manifest, 0, NULL);
    if (!root)
        return KILN_OK;   /* (the manifest is informational text; its checksum held) */
    json_t *n = json_object_get(json_object_get(root, "options"), "profiles");
    kiln_status st = KILN_OK;
    if (json_is_integer(n) && json_integer_value(n) != e->n_profiles)
        st = kiln__err(KILN_ERR_PARSE, "corrupted engine: its manifest lists %lld optimization profiles, the file "
                       "holds %d (its section table, which has no checksum, was altered)",
                       (long long)json_integer_value(n), e->n_profiles);
    json_decref(root);
    return st;
}

kiln_status kiln__engine_parse(const void *buf, size_t len, bool weights_in_place, struct kiln_engine **out)
{
    *out = NULL;
    section_table tab;
    KILN_TRY(read_section_table(buf, len, &tab));
    kiln_rbuf *sr = tab.sec;
    struct kiln_engine *e = kiln__calloc(1, sizeof *e);
    if (!e)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    e->target_kind = tab.target_kind;
    e->target_arch = tab.target_arch;
    e->manifest = kiln__strndup((const char *)sr[KILN_SEC_MANIFEST].p, sr[KILN_SEC_MANIFEST].len);
    kiln_status st = e->manifest ? KILN_OK : kiln__err(KILN_ERR_NOMEM, "out of memory");
    if (st == KILN_OK && !weights_in_place)
        st = copy_weights(e, &sr[KILN_SEC_WEIGHTS], &sr[KILN_SEC_PACKED]);
    sr[KILN_SEC_WEIGHTS].lasting = true;   /* the weights are used in place, never copied per tensor */
    if (st == KILN_OK)
        st = kiln__graph_read(&sr[KILN_SEC_GRAPH], &sr[KILN_SEC_WEIGHTS], NULL, 0, &e->g);
    if (st == KILN_OK && sr[KILN_SEC_GRAPH].pos != sr[KILN_SEC_GRAPH].len)
        st = kiln__err(KILN_ERR_PARSE, "corrupted engine: trailing bytes in the graph section");
    if (st == KILN_OK && tab.have[KILN_SEC_PROFILES])
        st = read_profiles(&sr[KILN_SEC_PROFILES], e);
    if (st == KILN_OK)
        st = check_manifest_profiles(e);
    if (st == KILN_OK && tab.have[KILN_SEC_PLAN])
        st = read_plan(&sr[KILN_SEC_PLAN], e);
    if (st == KILN_OK && tab.have[KILN_SEC_LAYERS]) {
        e->packed = sr[KILN_SEC_PACKED].p;   /* used in place, like the weights */
        e->packed_len = sr[KILN_SEC_PACKED].len;
        st = kiln__layers_read(&sr[KILN_SEC_LAYERS], e);
    }
    if (st == KILN_OK && tab.have[KILN_SEC_DEVICE_TACTICS])
        st = read_tactics(&sr[KILN_SEC_DEVICE_TACTICS], e);
    if (st == KILN_OK)
        st = kiln__engine_check_packed_only(e);
    if (st == KILN_OK)
        st = check_packed_isa(e);
    if (st != KILN_OK) {
        kiln_engine_free(e);
        return st;
    }
    *out = e;
    return KILN_OK;
}

kiln_status kiln_engine_load_buffer(const void *buf, size_t len, kiln_engine_t *out)
{
    if (!buf || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_load_buffer: NULL argument");
    return kiln__engine_parse(buf, len, false, out);
}
