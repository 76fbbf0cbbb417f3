//go:build cuda

package cuda

// kernelSource is compiled with NVRTC when the backend starts. One thread per
// output element unless a comment says otherwise; every kernel guards its
// index against n because the grid is rounded up to whole blocks. Integer
// parameters are declared long long because cu's Launch copies 8 bytes per
// argument.
const kernelSource = `
typedef long long i64;

extern "C" __global__ void add_row_vector(float* x, const float* v, i64 rows, i64 cols) {
	i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x;
	if (i < rows * cols) x[i] += v[i % cols];
}

extern "C" __global__ void add_col_vector(float* x, const float* v, i64 rows, i64 cols) {
	i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x;
	if (i < rows * cols) x[i] += v[i / cols];
}

// One thread per column.
extern "C" __global__ void sum_rows_into(float* dst, const float* x, i64 rows, i64 cols) {
	i64 c = blockIdx.x * (i64)blockDim.x + threadIdx.x;
	if (c >= cols) return;
	float s = 0;
	for (i64 r = 0; r < rows; r++) s += x[r * cols + c];
	dst[c] += s;
}

// One thread per row.
extern "C" __global__ void sum_cols_into(float* dst, const float* x, i64 rows, i64 cols) {
	i64 r = blockIdx.x * (i64)blockDim.x + threadIdx.x;
	if (r >= rows) return;
	float s = 0;
	for (i64 c = 0; c < cols; c++) s += x[r * cols + c];
	dst[r] += s;
}

extern "C" __global__ void relu(float* y, const float* x, i64 n) {
	i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x;
	if (i < n) y[i] = x[i] > 0 ? x[i] : 0;
}

extern "C" __global__ void relu_backward(float* dx, const float* dy, const float* y, i64 n) {
	i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x;
	if (i < n) dx[i] = y[i] > 0 ? dy[i] : 0;
}

extern "C" __global__ void axpy(float alpha, const float* x, float* y, i64 n) {
	i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x;
	if (i < n) y[i] += alpha * x[i];
}

extern "C" __global__ void scale(float alpha, float* x, i64 n) {
	i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x;
	if (i < n) x[i] *= alpha;
}

// One thread per row; loss[r] receives the row's cross-entropy, summed on the host.
extern "C" __global__ void softmax_xent(float* probs, double* loss, const float* logits, const i64* labels, i64 rows, i64 cols) {
	i64 r = blockIdx.x * (i64)blockDim.x + threadIdx.x;
	if (r >= rows) return;
	const float* in = logits + r * cols;
	float* out = probs + r * cols;
	float m = in[0];
	for (i64 c = 1; c < cols; c++) m = fmaxf(m, in[c]);
	double sum = 0;
	for (i64 c = 0; c < cols; c++) { double e = exp((double)(in[c] - m)); out[c] = (float)e; sum += e; }
	for (i64 c = 0; c < cols; c++) out[c] = (float)((double)out[c] / sum);
	loss[r] = log(sum) - (double)(in[labels[r]] - m);
}

extern "C" __global__ void softmax_xent_backward(float* d, const float* probs, const i64* labels, i64 rows, i64 cols) {
	i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x;
	if (i >= rows * cols) return;
	d[i] = probs[i] - (labels[i / cols] == i % cols ? 1.0f : 0.0f);
}

// One thread per element of the [C*KH*KW, OH*OW] patch matrix.
extern "C" __global__ void im2col(float* col, const float* x, i64 C, i64 H, i64 W, i64 KH, i64 KW, i64 stride, i64 pad, i64 OH, i64 OW) {
	i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x;
	i64 cols = OH * OW;
	if (i >= C * KH * KW * cols) return;
	i64 row = i / cols, j = i % cols;
	i64 c = row / (KH * KW), ky = (row / KW) % KH, kx = row % KW;
	i64 iy = (j / OW) * stride - pad + ky, ix = (j % OW) * stride - pad + kx;
	col[i] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? x[(c * H + iy) * W + ix] : 0;
}

// One thread per input element, gathering every patch entry that read it,
// so no atomics are needed and the sum order is fixed.
extern "C" __global__ void col2im(float* dx, const float* col, i64 C, i64 H, i64 W, i64 KH, i64 KW, i64 stride, i64 pad, i64 OH, i64 OW) {
	i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x;
	if (i >= C * H * W) return;
	i64 c = i / (H * W), iy = (i / W) % H, ix = i % W;
	float s = 0;
	for (i64 ky = 0; ky < KH; ky++) {
		i64 ty = iy + pad - ky;
		if (ty < 0 || ty % stride != 0 || ty / stride >= OH) continue;
		for (i64 kx = 0; kx < KW; kx++) {
			i64 tx = ix + pad - kx;
			if (tx < 0 || tx % stride != 0 || tx / stride >= OW) continue;
			s += col[((c * KH + ky) * KW + kx) * OH * OW + (ty / stride) * OW + tx / stride];
		}
	}
	dx[i] += s;
}

extern "C" __global__ void maxpool(float* y, int* argmax, const float* x, i64 planes, i64 H, i64 W, i64 K, i64 stride, i64 OH, i64 OW) {
	i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x;
	if (i >= planes * OH * OW) return;
	i64 p = i / (OH * OW), oy = (i / OW) % OH, ox = i % OW;
	i64 base = p * H * W;
	i64 best = base + oy * stride * W + ox * stride;
	float bv = x[best];
	for (i64 ky = 0; ky < K; ky++)
		for (i64 kx = 0; kx < K; kx++) {
			i64 at = base + (oy * stride + ky) * W + ox * stride + kx;
			if (x[at] > bv) { bv = x[at]; best = at; }
		}
	y[i] = bv;
	argmax[i] = (int)best;
}

// Overlapping windows may route several outputs to one input, hence atomicAdd.
extern "C" __global__ void maxpool_backward(float* dx, const float* dy, const int* argmax, i64 n) {
	i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x;
	if (i < n) atomicAdd(&dx[argmax[i]], dy[i]);
}

extern "C" __global__ void sgd_step(float* p, const float* g, float* v, float lr, float momentum, float wd, i64 n) {
	i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x;
	if (i >= n) return;
	float nv = momentum * v[i] + g[i] + wd * p[i];
	v[i] = nv;
	p[i] -= lr * nv;
}
`

// kernelNames lists the kernels loaded from kernelSource.
var kernelNames = []string{
	"add_row_vector", "add_col_vector", "sum_rows_into", "sum_cols_into",
	"relu", "relu_backward", "axpy", "scale",
	"softmax_xent", "softmax_xent_backward", "im2col", "col2im",
	"maxpool", "maxpool_backward", "sgd_step",
}
