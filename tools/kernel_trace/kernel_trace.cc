// A CUPTI injection library that records when every kernel, copy and memset ran on the device,
// graph-launched ones included, and writes them as CSV at exit: the per-kernel timeline inside a
// CUDA graph that the engine's own device timeline (whole forwards) cannot show, and that nsys
// would give where it runs (it does not on the lent GPU machine).
//
//   CUDA_INJECTION64_PATH=libkernel_trace.so KERNEL_TRACE_OUT=trace.csv dsa generate ...
//
// Columns: kind (kernel / memcpy / memset), start_ns, end_ns, stream, graph_id, graph_node,
// correlation, bytes, name (demangled, kernels only). CUPTI's CONCURRENT_KERNEL kind keeps kernels
// concurrent (programmatic dependent launch overlap included), so intervals may overlap.
// tools/kernel_timeline.py summarises the file.
#include <cupti.h>
#include <cxxabi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

constexpr size_t kBufferBytes = 8u << 20;
constexpr size_t kAlign = 8;

std::mutex g_mutex;
std::FILE* g_out = nullptr;
std::atomic<bool> g_flushed{false};

void report(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "kernel_trace: %s failed: %s\n", what, msg ? msg : "?");
}

std::string demangle(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  std::free(d);
  // The CSV's last column: no quotes or newlines inside it.
  for (char& c : s) {
    if (c == '"' || c == '\n' || c == ',') c = ' ';
  }
  return s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void write_record(const CUpti_Activity* rec) {
  switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      std::fprintf(g_out, "kernel,%llu,%llu,%u,%u,%llu,%u,0,%s\n", (unsigned long long)k->start,
                   (unsigned long long)k->end, k->streamId, k->graphId,
                   (unsigned long long)k->graphNodeId, k->correlationId, demangle(k->name).c_str());
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      std::fprintf(g_out, "memcpy,%llu,%llu,%u,%u,%llu,%u,%llu,kind%u\n",
                   (unsigned long long)m->start, (unsigned long long)m->end, m->streamId,
                   m->graphId, (unsigned long long)m->graphNodeId, m->correlationId,
                   (unsigned long long)m->bytes, unsigned(m->copyKind));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
      std::fprintf(g_out, "memset,%llu,%llu,%u,%u,%llu,%u,%llu,memset\n",
                   (unsigned long long)m->start, (unsigned long long)m->end, m->streamId,
                   m->graphId, (unsigned long long)m->graphNodeId, m->correlationId,
                   (unsigned long long)m->bytes);
      break;
    }
    default:
      break;
  }
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    CUpti_Activity* rec = nullptr;
    while (g_out && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      write_record(rec);
    }
    size_t dropped = 0;
    cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
    if (dropped) std::fprintf(stderr, "kernel_trace: %zu records dropped\n", dropped);
  }
  std::free(buffer);
}

void flush_all() {
  if (g_flushed.exchange(true)) return;
  report(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_out) std::fflush(g_out);
}

// Before a context goes, its records are still readable: flush them then (atexit handlers that the
// CUDA runtime registers later run before ours).
void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void*) {
  if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
    flush_all();
  }
}

}  // namespace

extern "C" int InitializeInjection(void) {
  const char* path = std::getenv("KERNEL_TRACE_OUT");
  g_out = std::fopen(path ? path : "kernel_trace.csv", "w");
  if (!g_out) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", path ? path : "kernel_trace.csv");
    return 0;
  }
  std::fprintf(g_out, "kind,start_ns,end_ns,stream,graph_id,graph_node,correlation,bytes,name\n");
  CUpti_SubscriberHandle subscriber;
  report(cuptiSubscribe(&subscriber, on_callback, nullptr), "cuptiSubscribe");
  report(cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE), "cuptiEnableDomain");
  report(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
         "cuptiActivityRegisterCallbacks");
  report(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernels");
  report(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy");
  report(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memset");
  std::atexit(flush_all);
  return 1;
}
