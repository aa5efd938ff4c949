// Whether a device can share memory with other processes by file descriptor here: one small
// AllocateShareable and ExportFd, tried once per device and remembered.
//
// Why try instead of asking: the CUDA driver reports support per device
// (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED), but what the process may do
// also depends on where it runs — a sandboxed kernel (gVisor) or a container can refuse the export
// the attribute promises. A refusal found at the first device collective would fail it; found
// here, before the cuda_ipc transport or the direct device path is set up, it only means device
// work goes over the host transports (staged), which always works.
//
// Every rank of one host probes the same driver and GPU model the same way, so ranks of a host
// agree on the answer (what the direct path's choice, made alike on every rank, relies on).
#pragma once

#include "core/base/status.h"
#include "core/device/device.h"

namespace braid::device {

// Ok, or why descriptor-shared memory is not available on `device` in this process. Thread-safe;
// the first call for a device allocates and frees one granule of device memory.
Status ProbeShareable(Device& device);

}  // namespace braid::device
