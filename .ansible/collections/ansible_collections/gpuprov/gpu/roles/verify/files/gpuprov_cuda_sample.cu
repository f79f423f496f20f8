// Copyright: gpuprov contributors
// Apache-2.0
// The verify role's CUDA sample: on every visible GPU, add two vectors with a kernel and check the sum on
// the host. Prints one line per GPU and a final "RESULT PASS <n> GPU(s)" or "RESULT FAIL ..."; exit 0 on pass.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call)                                                                              \
    do {                                                                                         \
        cudaError_t err_ = (call);                                                               \
        if (err_ != cudaSuccess) {                                                               \
            std::printf("RESULT FAIL %s: %s (%s)\n", #call, cudaGetErrorName(err_),              \
                        cudaGetErrorString(err_));                                               \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

__global__ void add(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

int main() {
    int runtime = 0, driver = 0, count = 0;
    CHECK(cudaRuntimeGetVersion(&runtime));
    CHECK(cudaDriverGetVersion(&driver));
    CHECK(cudaGetDeviceCount(&count));
    std::printf("runtime %d driver %d devices %d\n", runtime, driver, count);
    const int n = 1 << 20;
    const size_t bytes = n * sizeof(float);
    float *ha = (float *)std::malloc(bytes), *hb = (float *)std::malloc(bytes), *hc = (float *)std::malloc(bytes);
    for (int i = 0; i < n; ++i) { ha[i] = (float)i; hb[i] = 2.0f * (float)i; }
    for (int dev = 0; dev < count; ++dev) {
        cudaDeviceProp prop;
        CHECK(cudaSetDevice(dev));
        CHECK(cudaGetDeviceProperties(&prop, dev));
        float *da, *db, *dc;
        CHECK(cudaMalloc(&da, bytes));
        CHECK(cudaMalloc(&db, bytes));
        CHECK(cudaMalloc(&dc, bytes));
        CHECK(cudaMemcpy(da, ha, bytes, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(db, hb, bytes, cudaMemcpyHostToDevice));
        add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(hc, dc, bytes, cudaMemcpyDeviceToHost));
        int bad = 0;
        for (int i = 0; i < n; ++i) bad += hc[i] != 3.0f * (float)i;
        std::printf("device %d %s sm_%d%d: %s\n", dev, prop.name, prop.major, prop.minor, bad ? "WRONG" : "ok");
        CHECK(cudaFree(da));
        CHECK(cudaFree(db));
        CHECK(cudaFree(dc));
        if (bad) { std::printf("RESULT FAIL device %d: %d wrong sums\n", dev, bad); return 1; }
    }
    if (count == 0) { std::printf("RESULT FAIL no CUDA device\n"); return 1; }
    std::printf("RESULT PASS %d GPU(s)\n", count);
    return 0;
}
