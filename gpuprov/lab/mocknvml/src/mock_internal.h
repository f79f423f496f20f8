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

/* What an nvmlDevice_t points to: one entry of the device table. */
struct mock_device {
    unsigned int index;
    int lost_at_handle; /* nvmlDeviceGetHandleBy* fails with GPU_IS_LOST */
    int lost_at_query;  /* the handle exists, every query fails */
};

/* Print one trace line to stderr when GPUPROV_MOCK_NVML_TRACE is set. */
void mock_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Handle lookup shared by the public API and nvidia-smi's export table. */
nvmlReturn_t mock_handle_by_index(unsigned int index, nvmlDevice_t *device);

/* 1 when the pointer is a handle this library handed out. */
int mock_is_device(const void *ptr);

/* The NVML_ERROR_* name for a code ("GPU_IS_LOST"), NULL when unknown. */
const char *mock_error_name(nvmlReturn_t code);

/* Shared device helpers of mocknvml.c (profile key "gpu.<index>.<field>"). */
nvmlReturn_t mock_check_device(nvmlDevice_t device);
nvmlReturn_t mock_dev_uint(nvmlDevice_t dev, const char *field, unsigned int *out);
nvmlReturn_t mock_dev_str(nvmlDevice_t dev, const char *field, char *buf, unsigned int length);
unsigned int mock_device_count(void);
struct mock_device *mock_device_at(unsigned int index);

/* Path of the profile file the last nvmlInit loaded ("" before). */
const char *mock_conf_path(void);

/* MIG state (mig.c): loaded after the device table is built, dropped with the profile. */
void mock_mig_load(void);
void mock_mig_unload(void);

#endif /* GPUPROV_MOCKNVML_INTERNAL_H */
