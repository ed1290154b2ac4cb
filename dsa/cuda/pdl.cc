#include "dsa/cuda/pdl.h"

#include <cstdlib>
#include <cstring>

namespace dsa::cuda {

bool pdl_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("DSA_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

LaunchConfig::LaunchConfig(const LaunchShape& s) {
  config.gridDim = s.grid;
  config.blockDim = s.block;
  config.dynamicSmemBytes = s.smem_bytes;
  config.stream = s.stream;
  unsigned n = 0;
  if (pdl_enabled()) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (s.cluster > 1 || s.cluster_attribute_for_one) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = s.cluster;
    attrs[n].val.clusterDim.y = 1;
    attrs[n].val.clusterDim.z = 1;
    ++n;
  }
  config.attrs = attrs;
  config.numAttrs = n;
}

}  // namespace dsa::cuda
