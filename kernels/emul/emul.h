/* emul.h — emulated GPUs: CUDA's ordering over the CPU kernels
 * (TRELLIS_EMULATE=cuda), so that a CPU machine shows what the CUDA path's
 * order of calls does on a GPU.
 *
 * On a GPU a kernel returns before it has run, and so do a device-to-device
 * cudaMemcpy and cudaMemset; work runs in issue order per stream, the
 * legacy default stream (where copies and zeroing go) ordered with the
 * blocking compute stream, and NCCL's non-blocking stream ordered with
 * neither. The CPU runs each call before it returns, so a missing wait is
 * invisible there. Here every kernel is queued on its backend's compute
 * stream and copies and zeroing on the legacy stream, and nothing runs
 * until something waits for it:
 *   - ops->synchronize runs the queue up to the stream's last item
 *     (cudaStreamSynchronize; the legacy stream's items before it too);
 *   - a copy to the host runs all of it first (cudaMemcpy to pageable
 *     memory waits for every blocking stream), and so do a free (cudaFree)
 *     and a copy from the host of more than 1 MiB (from pageable memory);
 *   - a device-to-device copy, zeroing and a smaller copy from the host
 *     (its source staged, as the CUDA backend stages it in pinned memory)
 *     are queued on the legacy stream;
 *   - an operation of a mesh group (NCCL's ordering, core/group_emul.h, on
 *     the same memory) runs the items issued before it first — what the
 *     CUDA groups' event on the legacy stream makes NCCL's stream wait for
 *     (core/group_nccl.c) — and reads and writes its buffers when it runs.
 * With that wait taken out (TRELLIS_FAULT=collectives_unordered), or
 * narrowed to the compute kernels (copies_unordered), a collective reads
 * what the buffer held before the queued work, every time, and --verify
 * names the tensor.
 *
 * The table is the CUDA backend's: the same entries present (bf16
 * operands' GEMMs, the CPU's matmul behind them) and absent (the
 * deterministic mode's fixed-point sums). Device memory is host memory
 * (64-byte aligned), counted as the GPU's. One queue per process, shared
 * by every backend on its emulated device (a rank uses one). Errors of
 * queued kernels surface at the next wait, as a GPU's do. Everything on
 * one thread (the trainer's). */
#ifndef TL_KERNELS_EMUL_EMUL_H
#define TL_KERNELS_EMUL_EMUL_H

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Emulated GPUs a node has: enough for one per rank of any test job. */
#define TL_EMUL_DEVICES 8

extern const struct tl_kernel_ops tl_emul_kernel_ops;

/* A compute stream on emulated device `index` (and the device's memory
 * registered with core's allocator as CUDA's). */
tl_status tl_emul_backend_init(int index, void** ctx);
void tl_emul_backend_free(void* ctx);

/* Items queued and not yet run (for tests). */
int tl_emul_queued(void);

#ifdef __cplusplus
}
#endif

#endif
