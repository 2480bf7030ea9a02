/* ONNX import hardening (issue 6): external data confined to the model directory (symlinks,
 * FIFOs, directories refused), nesting bounded before protobuf-c recurses, declared sizes
 * checked against the stored data before allocating, linear-time import of huge graphs, and
 * validation of graph inputs, single static assignment, operator arity and opsets.
 * Models are built here with the protobuf-c ONNX bindings (or, for nesting far beyond what
 * the recursive packer could handle, written directly in the wire format). */
#include "kiln/kiln.h"
#include "onnx/onnx_import.h"
#include "onnx.pb-c.h"
#include "test.h"
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- building ModelProtos: everything comes from one arena, freed by arena_free ---- */
static void **arena;
static size_t n_arena, cap_arena;

static void *A(size_t n)
{
    if (n_arena == cap_arena) {
        cap_arena = cap_arena ? cap_arena * 2 : 1024;
        arena = realloc(arena, cap_arena * sizeof *arena);
    }
    return arena[n_arena++] = calloc(1, n ? n : 1);
}

static void arena_free(void)
{
    for (size_t i = 0; i < n_arena; i++)
        free(arena[i]);
    n_arena = 0;
}

static char *S(const char *s) { return strcpy(A(strlen(s) + 1), s); }

/* "a,b,,c" -> {"a","b","","c"} */
static size_t names(const char *csv, char ***out)
{
    size_t n = csv[0] ? 1 : 0;
    for (const char *p = csv; *p; p++)
        n += *p == ',';
    *out = A(sizeof(char *) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        const char *e = strchr(csv, ',');
        size_t len = e ? (size_t)(e - csv) : strlen(csv);
        (*out)[i] = A(len + 1);
        memcpy((*out)[i], csv, len);
        csv = e ? e + 1 : csv + len;
    }
    return n;
}

static Onnx__NodeProto *node(const char *op, const char *ins, const char *outs)
{
    Onnx__NodeProto *n = A(sizeof *n);
    onnx__node_proto__init(n);
    n->op_type = S(op);
    n->name = S(op);
    n->n_input = names(ins, &n->input);
    n->n_output = names(outs, &n->output);
    return n;
}

static void node_graph_attr(Onnx__NodeProto *n, const char *name, Onnx__GraphProto *g)
{
    Onnx__AttributeProto *a = A(sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = S(name);
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
    a->g = g;
    Onnx__AttributeProto **na = A(sizeof *na * (n->n_attribute + 1));
    for (size_t i = 0; i < n->n_attribute; i++)
        na[i] = n->attribute[i];
    na[n->n_attribute++] = a;
    n->attribute = na;
}

static Onnx__ValueInfoProto *vi(const char *name)
{
    Onnx__ValueInfoProto *v = A(sizeof *v);
    onnx__value_info_proto__init(v);
    v->name = S(name);
    Onnx__TypeProto *t = A(sizeof *t);
    onnx__type_proto__init(t);
    Onnx__TypeProto__Tensor *tt = A(sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = 1;
    t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    t->tensor_type = tt;
    v->type = t;
    return v;
}

/* A float tensor of the given shape, without data (callers add it). */
static Onnx__TensorProto *tensor(const char *name, size_t ndim, const int64_t *dims)
{
    Onnx__TensorProto *t = A(sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = S(name);
    t->has_data_type = 1;
    t->data_type = 1;
    t->n_dims = ndim;
    t->dims = A(sizeof(int64_t) * (ndim ? ndim : 1));
    memcpy(t->dims, dims, sizeof(int64_t) * ndim);
    return t;
}

static void tensor_external(Onnx__TensorProto *t, const char *location, const char *offset)
{
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    t->n_external_data = offset ? 2 : 1;
    t->external_data = A(sizeof *t->external_data * 2);
    for (size_t i = 0; i < t->n_external_data; i++) {
        Onnx__StringStringEntryProto *e = A(sizeof *e);
        onnx__string_string_entry_proto__init(e);
        e->key = S(i ? "offset" : "location");
        e->value = S(i ? offset : location);
        t->external_data[i] = e;
    }
}

/* A graph from nodes, inputs "a,b", outputs "y", initializers. */
static Onnx__GraphProto *graph(size_t n_nodes, Onnx__NodeProto **nodes, const char *ins, const char *outs,
                               size_t n_init, Onnx__TensorProto **inits)
{
    Onnx__GraphProto *g = A(sizeof *g);
    onnx__graph_proto__init(g);
    g->name = S("g");
    g->n_node = n_nodes;
    g->node = nodes;
    char **in, **out;
    g->n_input = names(ins, &in);
    g->n_output = names(outs, &out);
    g->input = A(sizeof(void *) * (g->n_input + 1));
    g->output = A(sizeof(void *) * (g->n_output + 1));
    for (size_t i = 0; i < g->n_input; i++)
        g->input[i] = vi(in[i]);
    for (size_t i = 0; i < g->n_output; i++)
        g->output[i] = vi(out[i]);
    g->n_initializer = n_init;
    g->initializer = inits;
    return g;
}

/* Serializes a model around g importing opset `version` of `domain`. Caller frees. */
static uint8_t *model_bytes(Onnx__GraphProto *g, const char *domain, int64_t version, size_t *len)
{
    Onnx__ModelProto m;
    onnx__model_proto__init(&m);
    m.has_ir_version = 1;
    m.ir_version = 8;
    Onnx__OperatorSetIdProto os, *osp = &os;
    onnx__operator_set_id_proto__init(&os);
    os.domain = (char *)domain;
    os.has_version = 1;
    os.version = version;
    m.n_opset_import = 1;
    m.opset_import = &osp;
    m.graph = g;
    *len = onnx__model_proto__get_packed_size(&m);
    uint8_t *b = malloc(*len ? *len : 1);
    onnx__model_proto__pack(&m, b);
    return b;
}

/* Imports g (opset 13); returns the status, *out gets the graph on success if out != NULL. */
static kiln_status import_opset(Onnx__GraphProto *g, const char *dir, const char *domain, int64_t version,
                                kiln_graph **out)
{
    size_t len;
    uint8_t *b = model_bytes(g, domain, version, &len);
    kiln_graph *kg = NULL;
    kiln_status st = kiln__onnx_import(b, len, dir, &kg, NULL);
    free(b);
    if (out)
        *out = kg;
    else
        kiln__graph_free(kg);
    return st;
}

static kiln_status import(Onnx__GraphProto *g, const char *dir, kiln_graph **out)
{
    return import_opset(g, dir, "", 13, out);
}

#define CHECK_ERR(expr, status, text)                                                              \
    do {                                                                                           \
        kiln_status st_ = (expr);                                                                  \
        CHECK_MSG(st_ == (status) && strstr(kiln_last_error(), text), "status %d, message: %s",   \
                  (int)st_, kiln_last_error());                                                    \
    } while (0)

static Onnx__NodeProto **nodes1(Onnx__NodeProto *n)
{
    Onnx__NodeProto **a = A(sizeof *a);
    a[0] = n;
    return a;
}

static void on_alarm(int s)
{
    (void)s;
    static const char msg[] = "test_import_hardening: HANG (external data on a FIFO?)\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(3);
    _exit(2);
}

/* ---- item 1: external data ---- */
static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, n, f) == n);
    if (f)
        fclose(f);
}

/* Y = Add(X, W) with W[4] stored externally at `location`. */
static kiln_status import_external(const char *dir, const char *location, const char *offset, kiln_graph **out)
{
    int64_t d = 4;
    Onnx__TensorProto *w = tensor("W", 1, &d);
    tensor_external(w, location, offset);
    Onnx__TensorProto **inits = A(sizeof *inits);
    inits[0] = w;
    return import(graph(1, nodes1(node("Add", "X,W", "Y")), "X", "Y", 1, inits), dir, out);
}

static void test_external_data(void)
{
    char dir[] = "/tmp/kiln_ext_XXXXXX", outside[] = "/tmp/kiln_out_XXXXXX", p[512], q[512];
    CHECK(mkdtemp(dir) && mkdtemp(outside));
    const float w[4] = {1, 2, 3, 4}, secret[4] = {42, 42, 42, 42};
    snprintf(p, sizeof p, "%s/w.bin", dir);
    write_file(p, w, sizeof w);
    snprintf(p, sizeof p, "%s/secret.bin", outside);
    write_file(p, secret, sizeof secret);
    snprintf(p, sizeof p, "%s/sub", dir);
    CHECK(mkdir(p, 0700) == 0);
    snprintf(p, sizeof p, "%s/sub/w2.bin", dir);
    write_file(p, w, sizeof w);

    /* a normal external-data model, also in a subdirectory and at an offset */
    kiln_graph *g = NULL;
    CHECK_MSG(import_external(dir, "w.bin", NULL, &g) == KILN_OK, "%s", kiln_last_error());
    int v = g ? kiln__graph_find(g, "W") : -1;
    CHECK(v >= 0 && g->values[v].init && g->values[v].init->nbytes == sizeof w &&
          !memcmp(g->values[v].init->data, w, sizeof w));
    kiln__graph_free(g);
    CHECK_MSG(import_external(dir, "./sub//w2.bin", NULL, NULL) == KILN_OK, "%s", kiln_last_error());
    float w8[8] = {0, 0, 0, 0, 1, 2, 3, 4};
    snprintf(p, sizeof p, "%s/w8.bin", dir);
    write_file(p, w8, sizeof w8);
    CHECK_MSG(import_external(dir, "w8.bin", "16", &g) == KILN_OK, "%s", kiln_last_error());
    v = g ? kiln__graph_find(g, "W") : -1;
    CHECK(v >= 0 && !memcmp(g->values[v].init->data, w, sizeof w));
    kiln__graph_free(g);

    /* a symlink to a file outside the model directory */
    snprintf(p, sizeof p, "%s/link.bin", dir);
    snprintf(q, sizeof q, "%s/secret.bin", outside);
    CHECK(symlink(q, p) == 0);
    CHECK_ERR(import_external(dir, "link.bin", NULL, NULL), KILN_ERR_PARSE, "symbolic link");
    /* a relative symlink leaving the directory */
    snprintf(p, sizeof p, "%s/rel.bin", dir);
    snprintf(q, sizeof q, "../%s/secret.bin", strrchr(outside, '/') + 1);
    CHECK(symlink(q, p) == 0);
    CHECK_ERR(import_external(dir, "rel.bin", NULL, NULL), KILN_ERR_PARSE, "symbolic link");
    /* a directory symlink and a path under it */
    snprintf(p, sizeof p, "%s/dlink", dir);
    CHECK(symlink(outside, p) == 0);
    CHECK_ERR(import_external(dir, "dlink/secret.bin", NULL, NULL), KILN_ERR_PARSE, "symbolic link");
    CHECK_ERR(import_external(dir, "sub/../dlink/secret.bin", NULL, NULL), KILN_ERR_PARSE, "escapes");
    /* a FIFO (opening it for reading would block forever) and a directory */
    snprintf(p, sizeof p, "%s/fifo", dir);
    CHECK(mkfifo(p, 0600) == 0);
    signal(SIGALRM, on_alarm);
    alarm(20);
    CHECK_ERR(import_external(dir, "fifo", NULL, NULL), KILN_ERR_PARSE, "not a regular file");
    alarm(0);
    CHECK_ERR(import_external(dir, "sub", NULL, NULL), KILN_ERR_PARSE, "not a regular file");
    /* lexical escapes, a missing file, short data, bad offsets */
    CHECK_ERR(import_external(dir, "../x.bin", NULL, NULL), KILN_ERR_PARSE, "escapes");
    snprintf(p, sizeof p, "%s/secret.bin", outside);
    CHECK_ERR(import_external(dir, p, NULL, NULL), KILN_ERR_PARSE, "absolute");
    CHECK_ERR(import_external(dir, "nothere.bin", NULL, NULL), KILN_ERR_IO, "cannot open");
    CHECK_ERR(import_external(dir, "w.bin", "8", NULL), KILN_ERR_PARSE, "too short");
    CHECK_ERR(import_external(dir, "w8.bin", "abc", NULL), KILN_ERR_PARSE, "not a non-negative integer");
    CHECK_ERR(import_external(dir, "w8.bin", "-4", NULL), KILN_ERR_PARSE, "not a non-negative integer");
    CHECK_ERR(import_external(dir, "w8.bin", "99999999999999999999", NULL), KILN_ERR_PARSE,
              "not a non-negative integer");

    const char *rm[] = {"w.bin", "w8.bin", "sub/w2.bin", "link.bin", "rel.bin", "dlink", "fifo", "sub"};
    for (size_t i = 0; i < sizeof rm / sizeof rm[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, rm[i]);
        CHECK(remove(p) == 0);
    }
    snprintf(p, sizeof p, "%s/secret.bin", outside);
    CHECK(remove(p) == 0 && rmdir(dir) == 0 && rmdir(outside) == 0);
    arena_free();
}

/* ---- item 2: nesting depth, written backwards in the wire format (no recursion anywhere) ---- */
typedef struct { uint8_t *b; size_t cap, pos; } rbuf;

static void pre_bytes(rbuf *r, const void *p, size_t n)
{
    r->pos -= n;
    memcpy(r->b + r->pos, p, n);
}

static void pre_varint(rbuf *r, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    do {
        t[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pre_bytes(r, t, n);
}

static void pre_int(rbuf *r, int field, uint64_t v)
{
    pre_varint(r, v);
    pre_varint(r, (uint64_t)field << 3);
}

static void pre_str(rbuf *r, int field, const char *s)
{
    pre_bytes(r, s, strlen(s));
    pre_varint(r, strlen(s));
    pre_varint(r, (uint64_t)field << 3 | 2);
}

/* Turns the bytes [pos, end) into length-delimited field `field`. */
static void pre_wrap(rbuf *r, size_t end, int field)
{
    pre_varint(r, end - r->pos);
    pre_varint(r, (uint64_t)field << 3 | 2);
}

/* A model whose graph nests `depth` If nodes (then_branch only), the innermost an Identity;
 * with types_depth > 0, the graph input's type is instead a sequence nested that deep. */
static uint8_t *nested_model(int depth, int types_depth, size_t *len)
{
    rbuf r = {.cap = 96 * (size_t)(depth + types_depth) + 4096};
    r.b = malloc(r.cap);
    r.pos = r.cap;
    char y[32];   /* every level writes its own output name (single static assignment) */
    /* innermost graph: node Identity(c) -> y0, output y0, name */
    pre_str(&r, 2, "y0");                        /* NodeProto.output */
    pre_str(&r, 1, "c");                         /* NodeProto.input */
    pre_str(&r, 4, "Identity");                  /* NodeProto.op_type */
    pre_wrap(&r, r.cap, 1);                      /* GraphProto.node */
    for (int k = 0; k < depth; k++) {
        size_t e = r.pos;
        snprintf(y, sizeof y, "y%d", k);
        pre_str(&r, 1, y);                       /* ValueInfoProto.name */
        pre_wrap(&r, e, 12);                     /* GraphProto.output */
        pre_str(&r, 2, "g");                     /* GraphProto.name */
        pre_wrap(&r, r.cap, 6);                  /* AttributeProto.g */
        pre_int(&r, 20, 5);                      /* AttributeProto.type = GRAPH */
        pre_str(&r, 1, "then_branch");           /* AttributeProto.name */
        pre_wrap(&r, r.cap, 5);                  /* NodeProto.attribute */
        snprintf(y, sizeof y, "y%d", k + 1);
        pre_str(&r, 2, y);
        pre_str(&r, 1, "c");
        pre_str(&r, 4, "If");
        pre_wrap(&r, r.cap, 1);                  /* GraphProto.node */
    }
    size_t e = r.pos;
    snprintf(y, sizeof y, "y%d", depth);
    pre_str(&r, 1, y);
    pre_wrap(&r, e, 12);                         /* GraphProto.output */
    e = r.pos;
    size_t te = r.pos;
    pre_int(&r, 1, 9);                           /* TypeProto.Tensor.elem_type = BOOL */
    pre_wrap(&r, te, 1);                         /* TypeProto.tensor_type */
    for (int k = 0; k < types_depth; k++) {
        pre_wrap(&r, te, 1);                     /* TypeProto.Sequence.elem_type */
        pre_wrap(&r, te, 4);                     /* TypeProto.sequence_type */
    }
    pre_wrap(&r, te, 2);                         /* ValueInfoProto.type */
    pre_str(&r, 1, "c");
    pre_wrap(&r, e, 11);                         /* GraphProto.input */
    pre_wrap(&r, r.cap, 7);                      /* ModelProto.graph */
    e = r.pos;
    pre_int(&r, 2, 13);                          /* OperatorSetIdProto.version */
    pre_wrap(&r, e, 8);                          /* ModelProto.opset_import */
    pre_int(&r, 1, 8);                           /* ModelProto.ir_version */
    *len = r.cap - r.pos;
    memmove(r.b, r.b + r.pos, *len);
    return r.b;
}

static kiln_status import_nested(int depth, int types_depth)
{
    size_t len;
    uint8_t *b = nested_model(depth, types_depth, &len);
    kiln_graph *g = NULL;
    kiln_status st = kiln__onnx_import(b, len, NULL, &g, NULL);
    kiln__graph_free(g);
    free(b);
    return st;
}

static void test_nesting(void)
{
    CHECK_MSG(import_nested(0, 0) == KILN_OK, "%s", kiln_last_error());
    CHECK_MSG(import_nested(5, 0) == KILN_OK, "%s", kiln_last_error());
    CHECK_MSG(import_nested(0, 5) == KILN_OK, "%s", kiln_last_error());
    CHECK_ERR(import_nested(40, 0), KILN_ERR_LIMIT, "nested deeper");   /* the importer's own limit */
    const int deep[] = {100, 3000, 10000, 100000};
    for (size_t i = 0; i < sizeof deep / sizeof deep[0]; i++) {
        CHECK_ERR(import_nested(deep[i], 0), KILN_ERR_LIMIT, "nested more than");
        CHECK_ERR(import_nested(0, deep[i]), KILN_ERR_LIMIT, "nested more than");
    }
    /* a truncated file is malformed, not deep */
    size_t len;
    uint8_t *b = nested_model(3000, 0, &len);
    kiln_graph *g = NULL;
    CHECK_ERR(kiln__onnx_import(b, len - 1, NULL, &g, NULL), KILN_ERR_PARSE, "not a valid ONNX model");
    free(b);
}

/* ---- item 7: declared sizes against stored data, before allocating ---- */
static size_t largest_request;
static void *count_malloc(size_t n, void *u)
{
    (void)u;
    largest_request = n > largest_request ? n : largest_request;
    return n > ((size_t)1 << 30) ? NULL : malloc(n);
}
static void *count_realloc(void *p, size_t n, void *u)
{
    (void)u;
    largest_request = n > largest_request ? n : largest_request;
    return n > ((size_t)1 << 30) ? NULL : realloc(p, n);
}
static void count_free(void *p, void *u) { (void)u; free(p); }

/* Imports a model whose initializer is t, counting the largest allocation. */
static kiln_status import_init(Onnx__TensorProto *t, const char *dir)
{
    Onnx__TensorProto **inits = A(sizeof *inits);
    inits[0] = t;
    kiln_allocator al = {count_malloc, count_realloc, count_free, NULL};
    largest_request = 0;
    kiln_set_allocator(&al);
    kiln_status st = import(graph(1, nodes1(node("Identity", "W", "Y")), "", "Y", 1, inits), dir, NULL);
    kiln_set_allocator(NULL);
    return st;
}

static void test_sizes(void)
{
    const int64_t huge[] = {2147483647}, huge2[] = {1073741824, 2}, ovf[] = {(int64_t)1 << 40, (int64_t)1 << 40},
                  ok[] = {3};
    CHECK_ERR(import_init(tensor("W", 1, huge), NULL), KILN_ERR_PARSE, "number of stored values");
    CHECK_MSG(largest_request < (1u << 20), "allocated %zu bytes before noticing the data is missing",
              largest_request);
    Onnx__TensorProto *t = tensor("W", 2, huge2);
    t->has_raw_data = 1;
    t->raw_data.len = 16;
    t->raw_data.data = A(16);
    CHECK_ERR(import_init(t, NULL), KILN_ERR_PARSE, "raw_data has 16 bytes");
    CHECK_MSG(largest_request < (1u << 20), "allocated %zu bytes", largest_request);
    t = tensor("W", 1, huge);
    t->n_float_data = 3;
    t->float_data = A(3 * sizeof(float));
    CHECK_ERR(import_init(t, NULL), KILN_ERR_PARSE, "number of stored values (3)");
    CHECK_MSG(largest_request < (1u << 20), "allocated %zu bytes", largest_request);
    CHECK_ERR(import_init(tensor("W", 2, ovf), NULL), KILN_ERR_LIMIT, "overflows");
    /* external data shorter than the shape */
    char dir[] = "/tmp/kiln_sz_XXXXXX", p[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(p, sizeof p, "%s/w.bin", dir);
    write_file(p, "0123456789abcdef", 16);
    t = tensor("W", 1, huge);
    tensor_external(t, "w.bin", NULL);
    CHECK_ERR(import_init(t, dir), KILN_ERR_PARSE, "too short");
    CHECK_MSG(largest_request < (1u << 20), "allocated %zu bytes", largest_request);
    CHECK(remove(p) == 0 && rmdir(dir) == 0);
    /* typed data that fits still loads */
    t = tensor("W", 1, ok);
    t->n_float_data = 3;
    t->float_data = A(3 * sizeof(float));
    CHECK_MSG(import_init(t, NULL) == KILN_OK, "%s", kiln_last_error());

    /* the TensorProto reader (--input x=file.pb) */
    t = tensor("x", 1, huge);
    size_t len = onnx__tensor_proto__get_packed_size(t);
    uint8_t *b = malloc(len);
    onnx__tensor_proto__pack(t, b);
    kiln_tensor out;
    kiln_allocator al = {count_malloc, count_realloc, count_free, NULL};
    largest_request = 0;
    kiln_set_allocator(&al);
    CHECK_ERR(kiln__onnx_tensor_parse(b, len, &out, NULL), KILN_ERR_PARSE, "number of stored values");
    kiln_set_allocator(NULL);
    CHECK_MSG(largest_request < (1u << 20), "allocated %zu bytes", largest_request);
    free(b);
    arena_free();
}

/* ---- item 9: a 200k-node chain imports in linear-ish time ---- */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_big_chain(int n, bool reversed)
{
    Onnx__NodeProto **nodes = A(sizeof *nodes * (size_t)n);
    char a[32], b[32];
    for (int i = 0; i < n; i++) {
        snprintf(a, sizeof a, "v%d", i);
        snprintf(b, sizeof b, "v%d", i + 1);
        nodes[reversed ? n - 1 - i : i] = node("Relu", a, b);
    }
    snprintf(b, sizeof b, "v%d", n);
    Onnx__GraphProto *gp = graph((size_t)n, nodes, "v0", b, 0, NULL);
    size_t len;
    uint8_t *buf = model_bytes(gp, "", 13, &len);
    arena_free();
    double t0 = now();
    kiln_graph *g = NULL;
    kiln_status st = kiln__onnx_import(buf, len, NULL, &g, NULL);
    double dt = now() - t0;
    printf("import of a %d-node chain (%s order, %zu bytes): %.2f s\n", n, reversed ? "reversed" : "sorted", len, dt);
    CHECK_MSG(st == KILN_OK, "%s", kiln_last_error());
    if (g) {
        CHECK(g->n_nodes == n);
        bool sorted = true;   /* node i reads v_i and writes v_{i+1} */
        for (int i = 0; i < g->n_nodes && sorted; i++) {
            snprintf(a, sizeof a, "v%d", i);
            const kiln_node *nd = &g->nodes[i];
            sorted = nd->n_in == 1 && !strcmp(g->values[nd->in[0]].name, a) && g->values[nd->out[0]].producer == i;
        }
        CHECK(sorted);
    }
    CHECK_MSG(dt < 30.0, "importing %d nodes took %.1f s (quadratic?)", n, dt);
    kiln__graph_free(g);
    free(buf);
}

/* ---- item 13: validation on import ---- */
static void test_validation(void)
{
    Onnx__NodeProto **two = A(sizeof *two * 2);
    /* duplicate graph inputs */
    CHECK_ERR(import(graph(1, nodes1(node("Add", "X,X", "Y")), "X,X", "Y", 0, NULL), NULL, NULL), KILN_ERR_PARSE,
              "graph input 'X' is declared more than once");
    int64_t d = 1;
    Onnx__TensorProto *w = tensor("W", 1, &d);
    w->n_float_data = 1;
    w->float_data = A(sizeof(float));
    Onnx__TensorProto **inits = A(sizeof *inits);
    inits[0] = w;
    /* an input that also has an initializer (a default) is fine, declared twice it is not */
    CHECK_MSG(import(graph(1, nodes1(node("Add", "X,W", "Y")), "X,W", "Y", 1, inits), NULL, NULL) == KILN_OK, "%s",
              kiln_last_error());
    CHECK_ERR(import(graph(1, nodes1(node("Add", "X,W", "Y")), "X,W,W", "Y", 1, inits), NULL, NULL),
              KILN_ERR_PARSE, "graph input 'W' is declared more than once");
    /* SSA: a node writing an initializer, a graph input, another node's output, its own twice */
    CHECK_ERR(import(graph(1, nodes1(node("Relu", "X", "W")), "X", "W", 1, inits), NULL, NULL), KILN_ERR_PARSE,
              "writes 'W', which is already an initializer");
    CHECK_ERR(import(graph(1, nodes1(node("Relu", "X", "X")), "X", "X", 0, NULL), NULL, NULL), KILN_ERR_PARSE,
              "writes 'X', which is already a graph input");
    two[0] = node("Relu", "X", "Y");
    two[1] = node("Neg", "X", "Y");
    CHECK_ERR(import(graph(2, two, "X", "Y", 0, NULL), NULL, NULL), KILN_ERR_PARSE,
              "writes 'Y', which is already the output of another node");
    CHECK_ERR(import(graph(1, nodes1(node("Dropout", "X", "Y,Y")), "X", "Y", 0, NULL), NULL, NULL), KILN_ERR_PARSE,
              "writes 'Y', which is already the output of another node");
    /* a subgraph node writing a value of the enclosing graph */
    Onnx__NodeProto *ifn = node("If", "C", "Y");
    node_graph_attr(ifn, "then_branch", graph(1, nodes1(node("Relu", "X", "X")), "", "X", 0, NULL));
    node_graph_attr(ifn, "else_branch", graph(1, nodes1(node("Relu", "X", "Z")), "", "Z", 0, NULL));
    CHECK_ERR(import(graph(1, nodes1(ifn), "C,X", "Y", 0, NULL), NULL, NULL), KILN_ERR_PARSE,
              "writes 'X', which is already a value of an enclosing graph");
    /* operator arity from the ONNX specification */
    CHECK_ERR(import(graph(1, nodes1(node("Relu", "X,X,X", "Y")), "X", "Y", 0, NULL), NULL, NULL), KILN_ERR_PARSE,
              "node 'Relu' (Relu) has 3 inputs; Relu takes exactly 1");
    CHECK_ERR(import(graph(1, nodes1(node("Relu", "X", "Y,Z")), "X", "Y", 0, NULL), NULL, NULL), KILN_ERR_PARSE,
              "has 2 outputs; Relu takes exactly 1");
    CHECK_ERR(import(graph(1, nodes1(node("Relu", "", "Y")), "X", "Y", 0, NULL), NULL, NULL), KILN_ERR_PARSE,
              "has 0 inputs; Relu takes exactly 1");
    CHECK_ERR(import(graph(1, nodes1(node("Clip", "X,,,", "Y")), "X", "Y", 0, NULL), NULL, NULL), KILN_ERR_PARSE,
              "has 4 inputs; Clip takes 1 to 3");
    CHECK_ERR(import(graph(1, nodes1(node("Concat", "", "Y")), "X", "Y", 0, NULL), NULL, NULL), KILN_ERR_PARSE,
              "Concat takes at least 1");
    CHECK_ERR(import(graph(1, nodes1(node("Add", "X", "Y")), "X", "Y", 0, NULL), NULL, NULL), KILN_ERR_PARSE,
              "Add takes exactly 2");
    CHECK_ERR(import(graph(1, nodes1(node("Constant", "X", "Y")), "X", "Y", 0, NULL), NULL, NULL), KILN_ERR_PARSE,
              "Constant takes exactly 0");
    CHECK_MSG(import(graph(1, nodes1(node("Clip", "X,,", "Y")), "X", "Y", 0, NULL), NULL, NULL) == KILN_OK, "%s",
              kiln_last_error());
    CHECK_MSG(import(graph(1, nodes1(node("Concat", "X,X,X,X,X", "Y")), "X", "Y", 0, NULL), NULL, NULL) == KILN_OK,
              "%s", kiln_last_error());
    CHECK_MSG(import(graph(1, nodes1(node("LSTM", "X,X,X", "")), "X", "", 0, NULL), NULL, NULL) == KILN_OK, "%s",
              kiln_last_error());
    CHECK_MSG(import(graph(1, nodes1(node("NotAnOp", "X,X,X", "Y")), "X", "Y", 0, NULL), NULL, NULL) == KILN_OK,
              "%s", kiln_last_error());   /* unknown ops: reported by the support check, not here */
    /* opsets */
    Onnx__GraphProto *ok = graph(1, nodes1(node("Relu", "X", "Y")), "X", "Y", 0, NULL);
    CHECK_ERR(import_opset(ok, NULL, "", -1, NULL), KILN_ERR_PARSE, "version -1 of domain 'ai.onnx' does not exist");
    CHECK_ERR(import_opset(ok, NULL, "", 0, NULL), KILN_ERR_PARSE, "version 0 of domain 'ai.onnx'");
    CHECK_ERR(import_opset(ok, NULL, "ai.onnx", 99999, NULL), KILN_ERR_PARSE, "version 99999 of domain 'ai.onnx'");
    CHECK_ERR(import_opset(ok, NULL, "ai.onnx.ml", 99, NULL), KILN_ERR_PARSE, "domain 'ai.onnx.ml'");
    CHECK_MSG(import_opset(ok, NULL, "", 1, NULL) == KILN_OK, "%s", kiln_last_error());
    CHECK_MSG(import_opset(ok, NULL, "", 21, NULL) == KILN_OK, "%s", kiln_last_error());
    CHECK_MSG(import_opset(ok, NULL, "com.example", 99999, NULL) == KILN_OK, "%s", kiln_last_error());
    arena_free();
}

static void test_big_chains(void)
{
    test_big_chain(200000, false);
    test_big_chain(200000, true);
}

/* With arguments, runs only the named parts (e.g. `test_import_hardening nesting`). */
int main(int argc, char **argv)
{
    static const struct { const char *name; void (*fn)(void); } parts[] = {
        {"external", test_external_data}, {"nesting", test_nesting}, {"sizes", test_sizes},
        {"validation", test_validation}, {"chain", test_big_chains},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        bool run = argc < 2;
        for (int a = 1; a < argc; a++)
            run |= !strcmp(argv[a], parts[i].name);
        if (run)
            parts[i].fn();
    }
    free(arena);
    return TEST_SUMMARY();
}
