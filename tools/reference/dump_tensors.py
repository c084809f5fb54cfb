#!/usr/bin/env python3
"""dump_tensors.py — saves llama.cpp's intermediate tensors for one batch of tokens.

Debugging aid for a forward pass that disagrees with a golden: runs llama.cpp (through
llama-cpp-python, same settings as make_golden.py: 1 thread, F16 KV cache, flash attention
off, no extra CPU buffer types) on the given token ids as one batch, with an eval callback
that copies every contiguous F32 tensor of the graph, and writes them to an .npz under
llama.cpp's graph names ("attn_norm-0", "Qcur-0" (after rope), "kq_soft_max-0",
"kqv_out-0", "ffn_inp-0", "l_out-0", "result_norm", "result_output", ...), each shaped
(ne3, ne2, ne1, ne0). numpy_llama.py --vs-dump compares its own intermediates with them.

  ~/refvenv/bin/python tools/reference/dump_tensors.py MODEL.gguf 1,403,407 out.npz

The ctypes view of struct ggml_tensor below follows ggml.h of the llama.cpp that
llama-cpp-python 0.3.36 bundles; another version may move its fields (the names printed
at the end then look wrong).
"""

import ctypes
import sys

import numpy as np

import make_golden


class GgmlTensor(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p),
                ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4),
                ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10),
                ("view_src", ctypes.c_void_p), ("view_offs", ctypes.c_size_t),
                ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64),
                ("extra", ctypes.c_void_p)]


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    import llama_cpp
    path, tokens, out = sys.argv[1], [int(t) for t in sys.argv[2].split(",")], sys.argv[3]
    dumps = {}

    @llama_cpp.ggml_backend_sched_eval_callback
    def on_tensor(t, ask, user_data):
        if ask:
            return True
        tt = ctypes.cast(t, ctypes.POINTER(GgmlTensor)).contents
        ne = list(tt.ne)
        if tt.type == 0 and tt.data and tt.nb[0] == 4 and tt.nb[1] == 4 * ne[0] \
                and tt.nb[2] == tt.nb[1] * ne[1] and tt.nb[3] == tt.nb[2] * ne[2]:
            n = ne[0] * ne[1] * ne[2] * ne[3]
            a = np.ctypeslib.as_array(ctypes.cast(tt.data, ctypes.POINTER(ctypes.c_float)),
                                      shape=(n,))
            dumps[tt.name.decode("utf-8", "replace")] = a.copy().reshape(ne[3], ne[2], ne[1], ne[0])
        return True

    mp = llama_cpp.llama_model_default_params()
    mp.use_extra_bufts = False
    model = llama_cpp.llama_model_load_from_file(path.encode(), mp)
    if not model:
        raise SystemExit("cannot load " + path)
    cp = llama_cpp.llama_context_default_params()
    n = max(256, len(tokens))
    cp.n_ctx = cp.n_batch = cp.n_ubatch = n
    cp.n_threads = cp.n_threads_batch = make_golden.N_THREADS
    cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cp.cb_eval = on_tensor
    ctx = llama_cpp.llama_init_from_model(model, cp)
    arr = (llama_cpp.llama_token * len(tokens))(*tokens)
    rc = llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(arr, len(tokens)))
    if rc != 0:
        raise SystemExit("llama_decode failed: %d" % rc)
    np.savez(out, **dumps)
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)
    print("%s: %d tensors (%s ...)" % (out, len(dumps), ", ".join(sorted(dumps)[:6])),
          file=sys.stderr)


if __name__ == "__main__":
    main()
