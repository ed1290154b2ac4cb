// The launch configuration of a kernel whose CTAs form thread-block clusters along x
// (cudaLaunchKernelEx with the cluster-dimension attribute), in one place for every launcher and
// occupancy query that needs it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace dsa::cuda {

// A configuration that owns the attribute it points at: not copyable, so the pointer stays valid.
struct ClusterLaunchConfig {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attr[1] = {};

  // grid CTAs of `block` threads in clusters of `cluster` along x. A cluster of 1 is given the
  // attribute only when `attribute_for_one` (a kernel that uses cluster barriers needs it).
  ClusterLaunchConfig(unsigned grid, unsigned block, size_t smem_bytes, cudaStream_t stream,
                      unsigned cluster, bool attribute_for_one = false) {
    config.gridDim = dim3(grid);
    config.blockDim = dim3(block);
    config.dynamicSmemBytes = smem_bytes;
    config.stream = stream;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = cluster > 1 || attribute_for_one ? 1 : 0;
  }
  ClusterLaunchConfig(const ClusterLaunchConfig&) = delete;
  ClusterLaunchConfig& operator=(const ClusterLaunchConfig&) = delete;
};

}  // namespace dsa::cuda
