/*
 * mock_internal.h - shared internals of the gpuprov mock libnvidia-ml.so.1.
 *
 * Nothing here is exported: the build passes -fvisibility=hidden and only the
 * NVML entry points carry MOCK_API.
 */
#ifndef GPUPROV_MOCKNVML_INTERNAL_H
#define GPUPROV_MOCKNVML_INTERNAL_H

#include "nvml_types.h"

#define MOCK_API __attribute__((visibility("default")))

/* Print one trace line to stderr when GPUPROV_MOCK_NVML_TRACE is set. */
void mock_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Handle lookup shared by the public API and nvidia-smi's export table. */
nvmlReturn_t mock_handle_by_index(unsigned int index, nvmlDevice_t *device);

/* 1 when the pointer is a handle this library handed out. */
int mock_is_device(const void *ptr);

/* The NVML_ERROR_* name for a code ("GPU_IS_LOST"), NULL when unknown. */
const char *mock_error_name(nvmlReturn_t code);

#endif /* GPUPROV_MOCKNVML_INTERNAL_H */
