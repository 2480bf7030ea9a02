/* An engine's layer plan on the runtime side: the layers the builder prepares (packed weights
 * gathered into the engine's PACKED bytes) and the layers a context restores from them through
 * their backends, used in place (the blobs stay in the engine's mapping). */
#ifndef KILN_RUNTIME_LAYERS_H
#define KILN_RUNTIME_LAYERS_H
#include "../backend/backend.h"
#include "../engine/engine.h"

/* Build time: prepares every top-level node of e->g on `be` with its constant inputs, stores the
 * layer records and the blobs (e->layers, e->packed), and drops the data of every constant that
 * only layers replacing it read (it then lives only in their blobs; e->target_arch gains what the
 * host needs to use them). want (NULL: every node): the nodes prepared with their constants; the
 * others are prepared as at run time (no packing, their weights kept as they are). */
kiln_status kiln__layers_prepare(struct kiln_engine *e, const kiln_backend *be, bool (*want)(const kiln_node *n));

/* Restores e's layers through their backends (blobs borrowed from the engine); *out = NULL when e
 * has no layer plan. Checks that every constant stored only packed is read only through inputs
 * that its readers' blobs replace. Release with kiln__layers_release. */
kiln_status kiln__layers_restore(const struct kiln_engine *e, kiln_layer **out);
void kiln__layers_release(kiln_layer *l, int n);
#endif
