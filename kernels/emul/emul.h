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
 * stream, and copies and zeroing as the CUDA backend issues them, and
 * nothing runs until something waits for it:
 *   - ops->synchronize runs the queue up to the stream's last item
 *     (cudaStreamSynchronize; the legacy stream's items before it too);
 *   - a copy to the host runs all of it first (cudaMemcpy to pageable
 *     memory waits for every blocking stream);
 *   - copies from the host, on the device and zeroing wait for everything
 *     queued and run at once, as kernels/cuda/backend.cu's do (they wait
 *     for the legacy stream before returning); with TRELLIS_FAULT=
 *     copies_async they are queued on the legacy stream instead, which is
 *     what cudaMemcpy and cudaMemset alone do.
 * The mesh groups run with NCCL's ordering (core/group_emul.h) on the same
 * memory and read it when their operation runs, never waiting for the
 * queue: a collective issued before the compute stream was synchronized
 * reads what the buffer held before the queued kernels, every time, and
 * --verify names the tensor.
 *
 * The table is the CUDA backend's: the same entries present (bf16
 * operands' GEMMs, the CPU's matmul behind them) and absent (the
 * deterministic mode's fixed-point sums). Device memory is host memory (64-byte aligned), counted
 * as the GPU's. One queue per process, shared by every backend on its emulated device (a rank uses
 * one). Errors of queued kernels surface at the next wait, as a GPU's do. Everything on one thread
 * (the trainer's). */
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
