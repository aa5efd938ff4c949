// How many mappings of the SIMULATED device's shareable memory (core/device/simulated_device.h
// names those memfds "braid-simulated-shareable") this process holds, read from /proc/self/maps:
// an account of cuda_ipc's inboxes independent of the transport's own.
#pragma once

namespace braid::testing {

int ShareableMappings();

}  // namespace braid::testing
