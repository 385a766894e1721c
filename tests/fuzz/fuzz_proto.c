/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for proto_msg_decode (docs/design.md §7, protocol/README.md).  Besides "never crash,
 * never leak", it checks the codec's fixed point: whatever the decoder accepts must encode, decode
 * again, and encode to the very same bytes; a mismatch aborts so the fuzzer keeps the input.
 * Seeds in tests/fuzz/corpus/proto/: valid encodings of every type plus garbage.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/mu.h"
#include "protocol/proto.h"

#include "common/mu_banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proto_msg m;
    struct proto_msg again;
    struct mu_buf b1;
    struct mu_buf b2;
    struct mu_err err;

    if (proto_msg_decode(data, size, &m, &err) != 0) {
        /* A failed decode owns no memory; release must still be safe. */
        if (m.gpus || m.tasks || m.argv || m.env)
            abort();
        proto_msg_release(&m);
        return 0;
    }
    mu_buf_init(&b1, 0);
    mu_buf_init(&b2, 0);
    if (proto_msg_encode(&m, &b1, &err) != 0)
        abort();
    if (proto_msg_decode(b1.data, b1.len, &again, &err) != 0)
        abort();
    if (proto_msg_encode(&again, &b2, &err) != 0)
        abort();
    if (b1.len != b2.len || memcmp(b1.data, b2.data, b1.len) != 0)
        abort();
    if (again.type != m.type || again.seq != m.seq || again.epoch != m.epoch)
        abort();
    mu_buf_release(&b2);
    mu_buf_release(&b1);
    proto_msg_release(&again);
    proto_msg_release(&m);
    return 0;
}
