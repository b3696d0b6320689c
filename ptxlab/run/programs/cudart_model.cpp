// The CUDA runtime a whole program is linked against when it runs on the CPU model.
//
// A program built by `ptxlab run --cpu` is compiled by nvcc as usual (`-cudart none`), and this
// file stands in for libcudart, as GPGPU-Sim's runtime does: the host code runs natively, and
// every call that needs the device (memory, launches, symbols) becomes a request to the
// `ptxlab run` process over the socket named by $PTXLAB_MODEL_FD. There the kernel runs on the
// CPU model, bit-exactly, and faults come back located to the lane and line.
//
// Device printf is buffered here and written to the program's own stdout at the points where
// the CUDA runtime flushes its printf buffer (a synchronisation, a blocking copy, the next
// launch, the end of the program), so host and device output interleave as on a GPU.
#include <cuda_runtime_api.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <string>
#include <vector>
#include <unistd.h>

namespace {

// Requests: one header, then `len` bytes. Answers: one header, then `len` bytes.
enum Op : uint32_t {
  OP_MALLOC = 1, OP_FREE = 2, OP_TO_DEVICE = 3, OP_TO_HOST = 4, OP_DEVICE_COPY = 5,
  OP_MEMSET = 6, OP_PARAMS = 7, OP_LAUNCH = 8, OP_SYMBOL = 9,
};
struct Request { uint32_t op; uint32_t pad; uint64_t a, b, c, len; };
struct Answer { int32_t status; uint32_t pad; uint64_t value, len; };

int channel = -1;
cudaError_t last_error = cudaSuccess;      // what cudaGetLastError returns and clears
cudaError_t sticky_error = cudaSuccess;    // a kernel fault: every later call returns it
std::string device_output;                 // device printf not yet flushed
bool launched_since_sync = false;

struct Kernel {
  std::string name;                                  // the mangled name, as in the PTX
  bool params_known = false;
  std::vector<std::pair<uint32_t, uint32_t>> params; // (offset, size) per parameter
  uint32_t param_bytes = 0;
};
std::map<const void*, Kernel>& kernels() { static std::map<const void*, Kernel> k; return k; }
std::map<const void*, std::string>& symbols() { static std::map<const void*, std::string> s; return s; }

struct CallConfig { dim3 grid, block; size_t shared; void* stream; };
std::vector<CallConfig>& configs() { static std::vector<CallConfig> c; return c; }

struct ErrorText { int code; const char* name; const char* text; };
const ErrorText kErrors[] = {
#include "cuda_errors.inc"
};

[[noreturn]] void die(const char* what) {
  fprintf(stderr, "[ptxlab] %s\n", what);
  fflush(stderr);
  _exit(125);
}

void connect() {
  if (channel >= 0) return;
  const char* fd = getenv("PTXLAB_MODEL_FD");
  if (!fd || !*fd)
    die("this program was built to run on the CPU model: run it with `ptxlab run --cpu FILE.cu`");
  channel = atoi(fd);
}

void write_all(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n) {
    ssize_t k = write(channel, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) die("the CPU model went away (the `ptxlab run` process ended)");
    p += k; n -= static_cast<size_t>(k);
  }
}

void read_all(void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n) {
    ssize_t k = read(channel, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) die("the CPU model went away (the `ptxlab run` process ended)");
    p += k; n -= static_cast<size_t>(k);
  }
}

// One request and its answer; the answer's bytes land in `reply` when given. Host threads
// share the one socket, so a request and its answer go as one.
std::mutex& channel_lock() { static std::mutex m; return m; }

Answer call(Op op, uint64_t a, uint64_t b, uint64_t c, const void* payload, size_t len,
            std::string* reply = nullptr) {
  std::lock_guard<std::mutex> hold(channel_lock());
  connect();
  Request rq{op, 0, a, b, c, len};
  write_all(&rq, sizeof rq);
  if (len) write_all(payload, len);
  Answer an;
  read_all(&an, sizeof an);
  std::string bytes(an.len, '\0');
  if (an.len) read_all(&bytes[0], an.len);
  if (reply) reply->swap(bytes);
  else if (!bytes.empty()) { fflush(stdout); fputs(bytes.c_str(), stderr); fflush(stderr); }
  return an;
}

void flush_device_output() {
  if (!device_output.empty()) {
    fwrite(device_output.data(), 1, device_output.size(), stdout);
    device_output.clear();
  }
}

// The end of every runtime call: remember the error as cudaGetLastError will report it.
cudaError_t result(cudaError_t err) {
  if (sticky_error != cudaSuccess) err = sticky_error;
  if (err != cudaSuccess) last_error = err;
  return err;
}

void synchronize() {
  flush_device_output();
  launched_since_sync = false;
}

struct AtExit {
  ~AtExit() {
    if (!device_output.empty()) {
      flush_device_output();
      fflush(stdout);
      if (launched_since_sync)
        fputs("[ptxlab] note: the device printf output above was printed when the program "
              "ended; on a GPU a program must synchronize (cudaDeviceSynchronize) after its "
              "last launch, or that output may be lost\n", stderr);
    }
  }
} at_exit;

cudaError_t load_params(Kernel& k) {
  if (k.params_known) return cudaSuccess;
  std::string reply;
  Answer an = call(OP_PARAMS, 0, 0, 0, k.name.data(), k.name.size(), &reply);
  if (an.status != 0) {
    fflush(stdout);
    fputs(reply.c_str(), stderr);
    return static_cast<cudaError_t>(an.status);
  }
  for (size_t i = 0; i + 8 <= reply.size(); i += 8) {
    uint32_t off, size;
    memcpy(&off, &reply[i], 4);
    memcpy(&size, &reply[i + 4], 4);
    k.params.emplace_back(off, size);
    if (off + size > k.param_bytes) k.param_bytes = off + size;
  }
  k.params_known = true;
  return cudaSuccess;
}

cudaError_t launch(const void* func, dim3 grid, dim3 block, void** args, size_t shared) {
  if (sticky_error != cudaSuccess) return result(sticky_error);
  auto it = kernels().find(func);
  if (it == kernels().end()) return result(cudaErrorInvalidDeviceFunction);
  Kernel& k = it->second;
  cudaError_t err = load_params(k);
  if (err != cudaSuccess) return result(err);
  flush_device_output();   // the runtime flushes the previous launches' printf at a launch
  std::string payload = k.name;
  payload.push_back('\0');
  uint32_t dims[6] = {grid.x, grid.y, grid.z, block.x, block.y, block.z};
  payload.append(reinterpret_cast<const char*>(dims), sizeof dims);
  uint64_t shared64 = shared;
  payload.append(reinterpret_cast<const char*>(&shared64), sizeof shared64);
  std::string params(k.param_bytes, '\0');
  for (size_t i = 0; i < k.params.size(); ++i)
    memcpy(&params[k.params[i].first], args[i], k.params[i].second);
  payload += params;
  std::string reply;
  Answer an = call(OP_LAUNCH, 0, 0, 0, payload.data(), payload.size(), &reply);
  device_output.append(reply, 0, an.value);
  launched_since_sync = true;
  if (an.value < reply.size()) {     // the model's report: printed now, as a sanitizer does
    flush_device_output();
    fflush(stdout);
    fputs(reply.c_str() + an.value, stderr);
    fflush(stderr);
  }
  cudaError_t status = static_cast<cudaError_t>(an.status);
  // A fault of the kernel is sticky, as on a GPU: the context is lost for the program.
  if (status == cudaErrorIllegalAddress || status == cudaErrorLaunchFailure ||
      status == cudaErrorAssert || status == cudaErrorLaunchTimeout ||
      status == cudaErrorMisalignedAddress || status == cudaErrorIllegalInstruction)
    sticky_error = status;
  return result(status);
}

// Whether the model holds the byte at `p` (one byte asked for: the copy itself checks the range).
bool on_device(uint64_t p) {
  std::string byte;
  return call(OP_TO_HOST, p, 1, 0, nullptr, 0, &byte).status == 0;
}

cudaError_t copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (sticky_error != cudaSuccess) return result(sticky_error);
  synchronize();
  if (count == 0) return result(cudaSuccess);
  uint64_t d = reinterpret_cast<uint64_t>(dst), s = reinterpret_cast<uint64_t>(src);
  Answer an{};
  switch (kind) {
    case cudaMemcpyHostToHost: memmove(dst, src, count); return result(cudaSuccess);
    case cudaMemcpyHostToDevice: an = call(OP_TO_DEVICE, d, count, 0, src, count); break;
    case cudaMemcpyDeviceToHost: {
      std::string bytes;
      an = call(OP_TO_HOST, s, count, 0, nullptr, 0, &bytes);
      if (an.status == 0) memcpy(dst, bytes.data(), count);
      else { fflush(stdout); fputs(bytes.c_str(), stderr); }
      break;
    }
    case cudaMemcpyDeviceToDevice: an = call(OP_DEVICE_COPY, d, s, count, nullptr, 0); break;
    default: {  // cudaMemcpyDefault: the model knows which pointers are its own
      bool from = on_device(s), to = on_device(d);
      return copy(dst, src, count, from ? (to ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                                        : (to ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost));
    }
  }
  return result(static_cast<cudaError_t>(an.status));
}

const ErrorText* find_error(cudaError_t e) {
  for (const ErrorText& t : kErrors)
    if (t.code == static_cast<int>(e)) return &t;
  return nullptr;
}

struct Event { double ms = 0; bool recorded = false; };

double now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

std::string symbol_name(const void* symbol) {
  auto it = symbols().find(symbol);
  return it == symbols().end() ? std::string() : it->second;
}

cudaError_t symbol_address(const void* symbol, uint64_t* addr, uint64_t* size) {
  std::string name = symbol_name(symbol);
  if (name.empty()) return cudaErrorInvalidSymbol;
  std::string reply;
  Answer an = call(OP_SYMBOL, 0, 0, 0, name.data(), name.size(), &reply);
  if (an.status != 0) return static_cast<cudaError_t>(an.status);
  *addr = an.value;
  if (reply.size() >= 8) memcpy(size, reply.data(), 8);
  return cudaSuccess;
}

}  // namespace

extern "C" {

// ---- what nvcc's generated host code calls --------------------------------------------------

void** __cudaRegisterFatBinary(void* fatCubin) {
  static void* handle[1] = {nullptr};
  handle[0] = fatCubin;
  return handle;
}
void __cudaRegisterFatBinaryEnd(void**) {}
void __cudaUnregisterFatBinary(void**) {}
char __cudaInitModule(void**) { return 0; }

void __cudaRegisterFunction(void**, const char* hostFun, char*, const char* deviceName, int,
                            uint3*, uint3*, dim3*, dim3*, int*) {
  Kernel k;
  k.name = deviceName;
  kernels()[hostFun] = k;
}

void __cudaRegisterVar(void**, char* hostVar, char*, const char* deviceName, int, size_t, int,
                       int) {
  symbols()[hostVar] = deviceName;
}

void __cudaRegisterManagedVar(void**, void** hostVarPtrAddress, char*, const char* deviceName,
                              int, size_t, int, int) {
  symbols()[hostVarPtrAddress] = deviceName;
}

unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, struct CUstream_st* s) {
  configs().push_back(CallConfig{grid, block, shared, s});
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shared, void* stream) {
  if (configs().empty()) return cudaErrorInvalidConfiguration;
  CallConfig c = configs().back();
  configs().pop_back();
  *grid = c.grid; *block = c.block; *shared = c.shared;
  *static_cast<void**>(stream) = c.stream;
  return cudaSuccess;
}

cudaError_t __cudaGetKernel(cudaKernel_t* handle, const void* func) {
  *handle = reinterpret_cast<cudaKernel_t>(const_cast<void*>(func));
  return cudaSuccess;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                               size_t shared, cudaStream_t) {
  return launch(reinterpret_cast<const void*>(kernel), grid, block, args, shared);
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                    size_t shared, cudaStream_t) {
  return launch(reinterpret_cast<const void*>(kernel), grid, block, args, shared);
}

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                             cudaStream_t) {
  return launch(func, grid, block, args, shared);
}

// ---- memory ---------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (sticky_error != cudaSuccess) return result(sticky_error);
  Answer an = call(OP_MALLOC, size, 0, 0, nullptr, 0);
  if (an.status == 0) *ptr = reinterpret_cast<void*>(an.value);
  return result(static_cast<cudaError_t>(an.status));
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return result(cudaSuccess);
  Answer an = call(OP_FREE, reinterpret_cast<uint64_t>(ptr), 0, 0, nullptr, 0);
  return result(static_cast<cudaError_t>(an.status));
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  *ptr = malloc(size ? size : 1);
  return result(*ptr ? cudaSuccess : cudaErrorMemoryAllocation);
}
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int) { return cudaMallocHost(ptr, size); }
cudaError_t cudaFreeHost(void* ptr) { free(ptr); return result(cudaSuccess); }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return copy(dst, src, count, kind);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t) {
  return copy(dst, src, count, kind);
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  if (sticky_error != cudaSuccess) return result(sticky_error);
  Answer an = call(OP_MEMSET, reinterpret_cast<uint64_t>(ptr), static_cast<uint8_t>(value), count,
                   nullptr, 0);
  return result(static_cast<cudaError_t>(an.status));
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t) {
  return cudaMemset(ptr, value, count);
}

cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                               cudaMemcpyKind) {
  uint64_t addr = 0, size = 0;
  cudaError_t err = symbol_address(symbol, &addr, &size);
  if (err != cudaSuccess) return result(err);
  if (offset + count > size) return result(cudaErrorInvalidValue);
  return copy(reinterpret_cast<void*>(addr + offset), src, count, cudaMemcpyHostToDevice);
}

cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                 cudaMemcpyKind) {
  uint64_t addr = 0, size = 0;
  cudaError_t err = symbol_address(symbol, &addr, &size);
  if (err != cudaSuccess) return result(err);
  if (offset + count > size) return result(cudaErrorInvalidValue);
  return copy(dst, reinterpret_cast<void*>(addr + offset), count, cudaMemcpyDeviceToHost);
}

cudaError_t cudaGetSymbolAddress(void** devPtr, const void* symbol) {
  uint64_t addr = 0, size = 0;
  cudaError_t err = symbol_address(symbol, &addr, &size);
  if (err == cudaSuccess) *devPtr = reinterpret_cast<void*>(addr);
  return result(err);
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  *free_bytes = size_t(8) << 30;
  *total = size_t(8) << 30;
  return result(cudaSuccess);
}

// ---- synchronisation, streams, events -------------------------------------------------------

cudaError_t cudaDeviceSynchronize(void) { synchronize(); return result(cudaSuccess); }
cudaError_t cudaStreamSynchronize(cudaStream_t) { synchronize(); return result(cudaSuccess); }
cudaError_t cudaDeviceReset(void) {
  synchronize();
  sticky_error = cudaSuccess;
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = reinterpret_cast<cudaStream_t>(new char[1]);
  return result(cudaSuccess);
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete[] reinterpret_cast<char*>(s);
  return result(cudaSuccess);
}
cudaError_t cudaStreamQuery(cudaStream_t) { return result(cudaSuccess); }

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = reinterpret_cast<cudaEvent_t>(new Event());
  return result(cudaSuccess);
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<Event*>(e);
  return result(cudaSuccess);
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  Event* ev = reinterpret_cast<Event*>(e);
  ev->ms = now_ms();
  ev->recorded = true;
  return result(cudaSuccess);
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { synchronize(); return result(cudaSuccess); }
cudaError_t cudaEventQuery(cudaEvent_t) { return result(cudaSuccess); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  Event* a = reinterpret_cast<Event*>(start);
  Event* b = reinterpret_cast<Event*>(end);
  if (!a->recorded || !b->recorded) return result(cudaErrorInvalidResourceHandle);
  *ms = static_cast<float>(b->ms - a->ms);
  return result(cudaSuccess);
}

// ---- errors ---------------------------------------------------------------------------------

cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = sticky_error;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char* cudaGetErrorString(cudaError_t e) {
  const ErrorText* t = find_error(e);
  return t ? t->text : "unrecognized error code";
}
const char* cudaGetErrorName(cudaError_t e) {
  const ErrorText* t = find_error(e);
  return t ? t->name : "unrecognized error code";
}

// ---- the device: one, described as the sm_90 model it is ------------------------------------

cudaError_t cudaGetDeviceCount(int* count) { *count = 1; return result(cudaSuccess); }
cudaError_t cudaGetDevice(int* device) { *device = 0; return result(cudaSuccess); }
cudaError_t cudaSetDevice(int device) {
  return result(device == 0 ? cudaSuccess : cudaErrorInvalidDevice);
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (device != 0) return result(cudaErrorInvalidDevice);
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "PTX Matrix Lab CPU model (sm_90)");
  prop->major = 9;
  prop->minor = 0;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024; prop->maxThreadsDim[1] = 1024; prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647; prop->maxGridSize[1] = 65535; prop->maxGridSize[2] = 65535;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerBlockOptin = 227 * 1024;
  prop->regsPerBlock = 65536;
  prop->multiProcessorCount = 1;
  prop->totalGlobalMem = size_t(8) << 30;
  return result(cudaSuccess);
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return result(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 * 1024; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = 227 * 1024; break;
    case cudaDevAttrMultiProcessorCount: *value = 1; break;
    default: *value = 0;
  }
  return result(cudaSuccess);
}
cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int) { return result(cudaSuccess); }
cudaError_t cudaDriverGetVersion(int* v) { *v = CUDART_VERSION; return result(cudaSuccess); }
cudaError_t cudaRuntimeGetVersion(int* v) { *v = CUDART_VERSION; return result(cudaSuccess); }

}  // extern "C"
