// flowlab's CUDA kernels (f32), compiled at run time by NVRTC, once per
// device architecture. One source file, so every kernel shares the same
// helpers and one compile covers them all. Index arithmetic is 64-bit.
//
// Conventions: tensors are dense row-major; `n` counts elements; kernels
// use grid-stride loops, so any launch size is correct.

#define GRID_STRIDE(i, n) \
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < (n); \
         i += (unsigned long long)blockDim.x * gridDim.x)

// Broadcasting: up to 6 dimensions; an input's stride is 0 along a
// dimension it broadcasts.
struct Bcast {
    int rank;
    unsigned long long dims[6];
    unsigned long long a_strides[6];
    unsigned long long b_strides[6];
};

__device__ __forceinline__ void bcast_offsets(const Bcast& s, unsigned long long i,
                                              unsigned long long* oa, unsigned long long* ob) {
    unsigned long long a = 0, b = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
        unsigned long long k = i % s.dims[d];
        i /= s.dims[d];
        a += k * s.a_strides[d];
        b += k * s.b_strides[d];
    }
    *oa = a;
    *ob = b;
}

#define BINARY(name, expr)                                                                        \
    extern "C" __global__ void name(const float* a, const float* b, float* out,                  \
                                    unsigned long long n, Bcast s) {                              \
        GRID_STRIDE(i, n) {                                                                       \
            unsigned long long ia, ib;                                                            \
            bcast_offsets(s, i, &ia, &ib);                                                        \
            float x = a[ia], y = b[ib];                                                           \
            out[i] = (expr);                                                                      \
        }                                                                                         \
    }

BINARY(add_f32, x + y)
BINARY(sub_f32, x - y)
BINARY(mul_f32, x * y)
BINARY(div_f32, x / y)
BINARY(maximum_f32, fmaxf(x, y))
BINARY(minimum_f32, fminf(x, y))
BINARY(pow_f32, powf(x, y))
// Gradient of ReLU: the incoming gradient where the forward input was > 0.
BINARY(relu_grad_f32, y > 0.0f ? x : 0.0f)

#define UNARY(name, expr)                                                                         \
    extern "C" __global__ void name(const float* a, float* out, unsigned long long n) {           \
        GRID_STRIDE(i, n) {                                                                       \
            float x = a[i];                                                                       \
            out[i] = (expr);                                                                      \
        }                                                                                         \
    }

UNARY(neg_f32, -x)
UNARY(exp_f32, expf(x))
UNARY(log_f32, logf(x))
UNARY(sqrt_f32, sqrtf(x))
UNARY(rsqrt_f32, rsqrtf(x))
UNARY(square_f32, x * x)
UNARY(tanh_f32, tanhf(x))
UNARY(sigmoid_f32, 1.0f / (1.0f + expf(-x)))
UNARY(relu_f32, x > 0.0f ? x : 0.0f)

extern "C" __global__ void fill_f32(float* out, float v, unsigned long long n) {
    GRID_STRIDE(i, n) { out[i] = v; }
}

// Row-wise reductions of a [rows, cols] matrix: one block per row, a
// shared-memory tree over the block (blockDim.x a power of two <= 1024).
#define ROW_REDUCE(name, init, combine)                                                           \
    extern "C" __global__ void name(const float* x, float* out, unsigned long long rows,          \
                                    unsigned long long cols) {                                    \
        __shared__ float buf[1024];                                                               \
        for (unsigned long long r = blockIdx.x; r < rows; r += gridDim.x) {                      \
            float acc = (init);                                                                   \
            for (unsigned long long c = threadIdx.x; c < cols; c += blockDim.x) {                 \
                float v = x[r * cols + c];                                                        \
                acc = (combine);                                                                  \
            }                                                                                     \
            buf[threadIdx.x] = acc;                                                               \
            __syncthreads();                                                                      \
            for (unsigned int w = blockDim.x / 2; w > 0; w /= 2) {                                \
                if (threadIdx.x < w) {                                                            \
                    float v = buf[threadIdx.x + w];                                               \
                    acc = buf[threadIdx.x];                                                       \
                    buf[threadIdx.x] = (combine);                                                 \
                }                                                                                 \
                __syncthreads();                                                                  \
            }                                                                                     \
            if (threadIdx.x == 0) out[r] = buf[0];                                                \
            __syncthreads();                                                                      \
        }                                                                                         \
    }

ROW_REDUCE(row_sum_f32, 0.0f, acc + v)
ROW_REDUCE(row_max_f32, __int_as_float(0xff800000), fmaxf(acc, v))

// Column sums of [rows, cols] (BiasAddGrad, and Sum over axis 0).
extern "C" __global__ void col_sum_f32(const float* x, float* out, unsigned long long rows,
                                       unsigned long long cols) {
    GRID_STRIDE(c, cols) {
        float acc = 0.0f;
        for (unsigned long long r = 0; r < rows; ++r) acc += x[r * cols + c];
        out[c] = acc;
    }
}

// Softmax of each row, given each row's maximum (row_max_f32) for stability.
extern "C" __global__ void softmax_rows_f32(const float* x, const float* row_max, float* out,
                                            unsigned long long rows, unsigned long long cols) {
    for (unsigned long long r = blockIdx.x; r < rows; r += gridDim.x) {
        __shared__ float sum;
        if (threadIdx.x == 0) sum = 0.0f;
        __syncthreads();
        float local = 0.0f;
        for (unsigned long long c = threadIdx.x; c < cols; c += blockDim.x) {
            float e = expf(x[r * cols + c] - row_max[r]);
            out[r * cols + c] = e;
            local += e;
        }
        atomicAdd(&sum, local);
        __syncthreads();
        for (unsigned long long c = threadIdx.x; c < cols; c += blockDim.x) out[r * cols + c] /= sum;
        __syncthreads();
    }
}

// Sparse softmax cross entropy from softmax probabilities: per-row loss
// -log p[label] and the gradient p - onehot(label). A label outside
// [0, cols) gives a NaN loss (the host checks labels before launching).
extern "C" __global__ void sparse_xent_rows_f32(const float* probs, const long long* labels,
                                                float* loss, float* grad, unsigned long long rows,
                                                unsigned long long cols) {
    GRID_STRIDE(i, rows * cols) {
        unsigned long long r = i / cols, c = i % cols;
        long long y = labels[r];
        float p = probs[i];
        grad[i] = p - (c == (unsigned long long)y ? 1.0f : 0.0f);
        if (c == 0) loss[r] = (y >= 0 && (unsigned long long)y < cols) ? -logf(probs[r * cols + y]) : __int_as_float(0x7fffffff);
    }
}

// x[rows, cols] + bias[cols].
extern "C" __global__ void bias_add_f32(const float* x, const float* bias, float* out,
                                        unsigned long long n, unsigned long long cols) {
    GRID_STRIDE(i, n) { out[i] = x[i] + bias[i % cols]; }
}

// NHWC im2col for a convolution: out[p, (ky*kw + kx)*C + c] for output
// position p = ((b*OH + oy)*OW + ox); zero outside the padded input.
extern "C" __global__ void im2col_nhwc_f32(const float* in, float* out, unsigned long long B,
                                           unsigned long long H, unsigned long long W,
                                           unsigned long long C, unsigned long long KH,
                                           unsigned long long KW, unsigned long long SH,
                                           unsigned long long SW, unsigned long long PT,
                                           unsigned long long PL, unsigned long long OH,
                                           unsigned long long OW) {
    unsigned long long patch = KH * KW * C;
    GRID_STRIDE(i, B * OH * OW * patch) {
        unsigned long long p = i / patch, k = i % patch;
        unsigned long long c = k % C, kx = (k / C) % KW, ky = k / (C * KW);
        unsigned long long ox = p % OW, oy = (p / OW) % OH, b = p / (OW * OH);
        long long y = (long long)(oy * SH + ky) - (long long)PT;
        long long x = (long long)(ox * SW + kx) - (long long)PL;
        out[i] = (y >= 0 && x >= 0 && y < (long long)H && x < (long long)W) ? in[((b * H + y) * W + x) * C + c] : 0.0f;
    }
}

// NHWC max pooling; windows clipped to the image (SAME padding never
// contributes a padded value).
extern "C" __global__ void max_pool_nhwc_f32(const float* in, float* out, unsigned long long B,
                                             unsigned long long H, unsigned long long W,
                                             unsigned long long C, unsigned long long KH,
                                             unsigned long long KW, unsigned long long SH,
                                             unsigned long long SW, unsigned long long PT,
                                             unsigned long long PL, unsigned long long OH,
                                             unsigned long long OW) {
    GRID_STRIDE(i, B * OH * OW * C) {
        unsigned long long c = i % C, ox = (i / C) % OW, oy = (i / (C * OW)) % OH, b = i / (C * OW * OH);
        float m = __int_as_float(0xff800000);
        for (unsigned long long ky = 0; ky < KH; ++ky) {
            long long y = (long long)(oy * SH + ky) - (long long)PT;
            if (y < 0 || y >= (long long)H) continue;
            for (unsigned long long kx = 0; kx < KW; ++kx) {
                long long x = (long long)(ox * SW + kx) - (long long)PL;
                if (x < 0 || x >= (long long)W) continue;
                m = fmaxf(m, in[((b * H + y) * W + x) * C + c]);
            }
        }
        out[i] = m;
    }
}

// Optimizer updates in place, as TensorFlow's training ops.
extern "C" __global__ void apply_sgd_f32(float* w, const float* g, float lr, unsigned long long n) {
    GRID_STRIDE(i, n) { w[i] -= lr * g[i]; }
}

extern "C" __global__ void apply_momentum_f32(float* w, float* accum, const float* g, float lr,
                                              float momentum, unsigned long long n) {
    GRID_STRIDE(i, n) {
        accum[i] = momentum * accum[i] + g[i];
        w[i] -= lr * accum[i];
    }
}

// Adam with the bias corrections folded into lr_t = lr * sqrt(1-b2^t)/(1-b1^t).
extern "C" __global__ void apply_adam_f32(float* w, float* m, float* v, const float* g, float lr_t,
                                          float beta1, float beta2, float eps, unsigned long long n) {
    GRID_STRIDE(i, n) {
        m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
        v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
        w[i] -= lr_t * m[i] / (sqrtf(v[i]) + eps);
    }
}
