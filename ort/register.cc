// The library's entry point, RegisterCustomOps, and the lifetime of its op domains.
#include <mutex>
#include <string>
#include <vector>

#include "ops.h"
#include "ort_glue.h"

namespace polyquant::ort {
namespace {

// The domains are created once per load of the library and shared by every session options object
// they are added to. ONNX Runtime only borrows them: the API says a domain must outlive the session
// options and sessions it was added to, and it never frees them itself. Those hold the library
// loaded (Python's SessionOptions and InferenceSession keep a reference to it; a C/C++ user must not
// unload it before releasing them), so the library's unload is the moment to release them.
std::mutex g_domains_mutex;
std::vector<OrtCustomOpDomain*> g_domains;

struct DomainsRelease {
  ~DomainsRelease() {
    std::lock_guard<std::mutex> lock(g_domains_mutex);
    for (OrtCustomOpDomain* domain : g_domains) api().ReleaseCustomOpDomain(domain);
    g_domains.clear();
  }
};
// Defined after g_domains and its mutex, so destroyed (at unload) before them.
DomainsRelease g_domains_release;

// The element types beyond the 1.17 headers that the Q/DQ ops may declare. Declaring a type the
// runtime lacks fails every session, so each is probed; and only runtimes from 1.32 on (the version
// these declarations were verified with) get them at all.
RuntimeTypes probe_runtime_types(const OrtApiBase* api_base) {
  RuntimeTypes types;
  if (!parse_runtime_version(api_base->GetVersionString()).at_least(1, 32)) return types;
  types.uint2 = runtime_has_element_type(kOrtUInt2);
  types.int2 = runtime_has_element_type(kOrtInt2);
  types.float8e8m0 = runtime_has_element_type(kOrtFloat8E8M0);
  return types;
}

void create_domains(const OrtApiBase* api_base) {
  if (!g_domains.empty()) return;
  std::vector<OrtCustomOpDomain*> domains;
  try {
    add_qonnx_domains(domains);
    add_qdq_domains(domains, probe_runtime_types(api_base));
  } catch (...) {
    for (OrtCustomOpDomain* d : domains) api().ReleaseCustomOpDomain(d);
    throw;
  }
  g_domains = std::move(domains);
}

}  // namespace

OrtCustomOpDomain* add_domain(std::vector<OrtCustomOpDomain*>& domains, const char* name) {
  OrtCustomOpDomain* domain = nullptr;
  check(api().CreateCustomOpDomain(name, &domain), name);
  domains.push_back(domain);
  return domain;
}

}  // namespace polyquant::ort

// The library's only exported symbol: ONNX Runtime calls it when the library is registered
// (SessionOptions.register_custom_ops_library in Python, RegisterCustomOpsLibrary_V2 in C).
extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  using namespace polyquant::ort;
  if (api_base == nullptr) return nullptr;  // nothing to report an error through
  const OrtApi* table = api_base->GetApi(kOrtApiVersion);
  if (table == nullptr) {
    // Every runtime serves version 1, whose first entry is CreateStatus.
    const OrtApi* oldest = api_base->GetApi(1);
    if (oldest == nullptr) return nullptr;
    const std::string message = std::string("polyquant: the custom-op library needs ONNX Runtime 1.17 or later "
                                            "(API version 17); this runtime is ") +
                                api_base->GetVersionString();
    return oldest->CreateStatus(ORT_FAIL, message.c_str());
  }
  std::lock_guard<std::mutex> lock(g_domains_mutex);
  try {
    if (g_domains.empty()) set_api(table);
    create_domains(api_base);
    for (OrtCustomOpDomain* domain : g_domains) check(api().AddCustomOpDomain(options, domain));
    return nullptr;
  } catch (...) {
    return status_from_current_exception("polyquant: registering the custom ops failed: ");
  }
}
