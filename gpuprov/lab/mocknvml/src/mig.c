/*
 * mig.c - Multi-Instance GPU in the gpuprov mock NVML.
 *
 * What a MIG-capable board does, reduced to what clients such as the gpuprov
 * mig role, mig-parted and DCGM ask NVML:
 *
 *   - MIG mode current/pending (nvmlDeviceGetMigMode / nvmlDeviceSetMigMode).
 *     Setting the mode takes effect at once when no process holds the GPU's
 *     /dev/nvidia<minor> (NVML resets the GPU itself, as drivers >= R470 do
 *     on bare metal); otherwise only the pending mode changes and
 *     activationStatus is NVML_ERROR_IN_USE, as on a GPU that something still
 *     uses.  The pending mode becomes current at the next boot.
 *   - GPU instances (GI) and compute instances (CI) with the real profile
 *     tables (ids, names, slice and instance counts, placements) of the
 *     A100-SXM4-40GB, A100-SXM4-80GB, H100-SXM5-80GB and H200, selected by the
 *     profile key gpu.N.mig_table.
 *
 * MIG configuration is GPU state, not process state, so it lives in a state
 * file that every process loading the library shares:
 *   $GPUPROV_MOCK_NVML_STATE, else the loaded profile's path with ".conf"
 *   replaced by ".state" (/etc/gpuprov/mock-nvml.state in lab hosts).
 * The file is written only when something changes; without it the profile's
 * mig_mode values apply and no instances exist.
 *
 * Reboots: the state file records the boot it was written in
 * ($GPUPROV_MOCK_NVML_BOOT_ID, else the kernel's boot_id plus the start time
 * of PID 1, which changes when a container restarts).  Loaded in another
 * boot, the GPU behaves as after a real reboot: every GI and CI is gone and
 * the pending MIG mode has become current - MIG mode persists, the layout
 * does not (see docs/field-failures.md, 'MIG instances gone after a reboot').
 *
 * Sources: NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles"
 * (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/) for profile
 * names, ids, instance counts, SMs, memory and placements; NVML API
 * reference (nvml.h) for calls, structures and return codes.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <unistd.h>
#include <unistd.h>

#include "mock_internal.h"

int mock_initialized(void); /* mocknvml.c */

#define MIG_MAX_DEVICES 64
#define MIG_MAX_GI 8
#define MIG_MAX_CI 8
#define MIG_MEMORY_SLICES 8
#define MIG_COMPUTE_SLICES 7
#define MIG_NAME_SIZE 96 /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */

#define NVML_DEVICE_MIG_DISABLE 0u
#define NVML_DEVICE_MIG_ENABLE 1u
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0u

/* ------------------------------------------------------------------ */
/* NVML structures (layouts as in nvml.h / pynvml 13.x)               */
/* ------------------------------------------------------------------ */

typedef struct {
    unsigned int start;
    unsigned int size;
} nvmlPlacement_t; /* nvmlGpuInstancePlacement_t, nvmlComputeInstancePlacement_t */

typedef struct {
    unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount;
    unsigned int copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct {
    unsigned int version;
    unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount;
    unsigned int copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[MIG_NAME_SIZE];
} nvmlGpuInstanceProfileInfo_v2_t;
#define nvmlGpuInstanceProfileInfo_v2 0x02000098u

typedef struct {
    unsigned int id, sliceCount, instanceCount, multiprocessorCount;
    unsigned int sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct {
    unsigned int version;
    unsigned int id, sliceCount, instanceCount, multiprocessorCount;
    unsigned int sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
    char name[MIG_NAME_SIZE];
} nvmlComputeInstanceProfileInfo_v2_t;
#define nvmlComputeInstanceProfileInfo_v2 0x02000088u

struct gi_state;
struct ci_state;
typedef struct gi_state *nvmlGpuInstance_t;
typedef struct ci_state *nvmlComputeInstance_t;

typedef struct {
    nvmlDevice_t device;
    unsigned int id;
    unsigned int profileId;
    nvmlPlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned int id;
    unsigned int profileId;
    nvmlPlacement_t placement;
} nvmlComputeInstanceInfo_t;

/* ------------------------------------------------------------------ */
/* Profile tables (NVIDIA MIG User Guide, "Supported MIG Profiles")    */
/* ------------------------------------------------------------------ */

struct gi_profile {
    unsigned int index;      /* NVML_GPU_INSTANCE_PROFILE_* */
    unsigned int id;         /* the profile id nvidia-smi mig -lgip shows */
    const char *name;        /* without "MIG " */
    unsigned int slices;     /* compute slices */
    unsigned int instances;  /* most instances of this profile */
    unsigned int sms;
    unsigned long long memory_mib;
    unsigned int ce, dec, enc, jpeg, ofa;
    unsigned int size;       /* memory slices (of 8) a placement covers */
    unsigned int step;       /* placements start at 0, step, 2*step ... */
    unsigned int last_start; /* ... up to this start */
};

struct mig_table {
    const char *name;
    const struct gi_profile *profiles;
    size_t n_profiles;
};

#define ROWS(t) (t), sizeof(t) / sizeof((t)[0])

/* A100-SXM4-40GB: 1g.5gb x7, 1g.5gb+me, 1g.10gb x4, 2g.10gb x3, 3g.20gb x2, 4g.20gb, 7g.40gb. */
static const struct gi_profile a100_40gb[] = {
    {0, 19, "1g.5gb", 1, 7, 14, 4864, 1, 0, 0, 0, 0, 1, 1, 6},
    {7, 20, "1g.5gb+me", 1, 1, 14, 4864, 1, 1, 0, 1, 1, 1, 1, 6},
    {9, 15, "1g.10gb", 1, 4, 14, 9856, 1, 1, 0, 0, 0, 2, 2, 6},
    {1, 14, "2g.10gb", 2, 3, 28, 9856, 2, 1, 0, 0, 0, 2, 2, 4},
    {2, 9, "3g.20gb", 3, 2, 42, 19968, 3, 2, 0, 0, 0, 4, 4, 4},
    {3, 5, "4g.20gb", 4, 1, 56, 19968, 4, 2, 0, 0, 0, 4, 4, 0},
    {4, 0, "7g.40gb", 7, 1, 98, 40192, 7, 5, 0, 1, 1, 8, 8, 0},
};

/* A100-SXM4-80GB: the same geometry with twice the memory. */
static const struct gi_profile a100_80gb[] = {
    {0, 19, "1g.10gb", 1, 7, 14, 9728, 1, 0, 0, 0, 0, 1, 1, 6},
    {7, 20, "1g.10gb+me", 1, 1, 14, 9728, 1, 1, 0, 1, 1, 1, 1, 6},
    {9, 15, "1g.20gb", 1, 4, 14, 19968, 1, 1, 0, 0, 0, 2, 2, 6},
    {1, 14, "2g.20gb", 2, 3, 28, 19968, 2, 1, 0, 0, 0, 2, 2, 4},
    {2, 9, "3g.40gb", 3, 2, 42, 40192, 3, 2, 0, 0, 0, 4, 4, 4},
    {3, 5, "4g.40gb", 4, 1, 56, 40192, 4, 2, 0, 0, 0, 4, 4, 0},
    {4, 0, "7g.80gb", 7, 1, 98, 81152, 7, 5, 0, 1, 1, 8, 8, 0},
};

/* H100-SXM5-80GB (Hopper: a decoder and a JPEG engine per slice). */
static const struct gi_profile h100_80gb[] = {
    {0, 19, "1g.10gb", 1, 7, 16, 9984, 1, 1, 0, 1, 0, 1, 1, 6},
    {7, 20, "1g.10gb+me", 1, 1, 16, 9984, 1, 1, 0, 1, 1, 1, 1, 6},
    {9, 15, "1g.20gb", 1, 4, 26, 20096, 1, 1, 0, 1, 0, 2, 2, 6},
    {1, 14, "2g.20gb", 2, 3, 32, 20096, 2, 2, 0, 2, 0, 2, 2, 4},
    {2, 9, "3g.40gb", 3, 2, 60, 40448, 3, 3, 0, 3, 0, 4, 4, 4},
    {3, 5, "4g.40gb", 4, 1, 64, 40448, 4, 4, 0, 4, 0, 4, 4, 0},
    {4, 0, "7g.80gb", 7, 1, 132, 81152, 8, 7, 0, 7, 1, 8, 8, 0},
};

/* H200 (141 GB): memory sizes are the profile names' GB in MiB, rounded down to 256 MiB. */
static const struct gi_profile h200_141gb[] = {
    {0, 19, "1g.18gb", 1, 7, 16, 17152, 1, 1, 0, 1, 0, 1, 1, 6},
    {7, 20, "1g.18gb+me", 1, 1, 16, 17152, 1, 1, 0, 1, 1, 1, 1, 6},
    {9, 15, "1g.35gb", 1, 4, 26, 33280, 1, 1, 0, 1, 0, 2, 2, 6},
    {1, 14, "2g.35gb", 2, 3, 32, 33280, 2, 2, 0, 2, 0, 2, 2, 4},
    {2, 9, "3g.71gb", 3, 2, 60, 67584, 3, 3, 0, 3, 0, 4, 4, 4},
    {3, 5, "4g.71gb", 4, 1, 64, 67584, 4, 4, 0, 4, 0, 4, 4, 0},
    {4, 0, "7g.141gb", 7, 1, 132, 134400, 8, 7, 0, 7, 1, 8, 8, 0},
};

static const struct mig_table tables[] = {
    {"a100-sxm4-40gb", ROWS(a100_40gb)},
    {"a100-sxm4-80gb", ROWS(a100_80gb)},
    {"h100-sxm5-80gb", ROWS(h100_80gb)},
    {"h200-141gb", ROWS(h200_141gb)},
};

/* NVML_COMPUTE_INSTANCE_PROFILE_* index -> compute slices (0: not on these GPUs). */
static const unsigned int ci_slices_by_index[] = {1, 2, 3, 4, 7, 0, 0};
#define N_CI_INDEX (sizeof(ci_slices_by_index) / sizeof(ci_slices_by_index[0]))

/* ------------------------------------------------------------------ */
/* State                                                              */
/* ------------------------------------------------------------------ */

struct ci_state {
    int used;
    unsigned int id;
    unsigned int profile; /* CI profile id (= NVML_COMPUTE_INSTANCE_PROFILE_* index) */
    unsigned int start, size;
    struct gi_state *gi;
};

struct gi_state {
    int used;
    unsigned int id;
    const struct gi_profile *profile;
    unsigned int start;
    unsigned int device; /* index */
    struct ci_state cis[MIG_MAX_CI];
};

struct mig_device {
    nvmlReturn_t mode_error; /* what GetMigMode returns when not SUCCESS (NOT_SUPPORTED on V100) */
    unsigned int current, pending;
    const struct mig_table *table;
    char uuid[96];
    struct gi_state gis[MIG_MAX_GI];
};

static pthread_mutex_t m_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mig_device m_devs[MIG_MAX_DEVICES];
static unsigned int m_n;
static char m_state_path[4096];
/* stat(2) through the system call: glibc >= 2.33 exports stat() as a new symbol version, which
 * would stop the mock loading on the Ubuntu 20.04 stand-in (glibc 2.31). The kernel's struct stat
 * for newfstatat is glibc's struct stat on x86_64 and aarch64. */
static int m_stat(const char *path, struct stat *st)
{
    return (int)syscall(SYS_newfstatat, AT_FDCWD, path, st, 0);
}

static struct stat m_seen; /* the state file as last read or written */
static int m_seen_valid;

static void state_path(void)
{
    const char *env = getenv("GPUPROV_MOCK_NVML_STATE");
    if (env != NULL && env[0] != '\0') {
        snprintf(m_state_path, sizeof(m_state_path), "%s", env);
        return;
    }
    const char *conf = mock_conf_path();
    size_t n = strlen(conf);
    if (n > 5 && strcmp(conf + n - 5, ".conf") == 0)
        snprintf(m_state_path, sizeof(m_state_path), "%.*s.state", (int)(n - 5), conf);
    else
        snprintf(m_state_path, sizeof(m_state_path), "%s.state", conf);
}

/* The identity of this boot: $GPUPROV_MOCK_NVML_BOOT_ID, else boot_id/<start time of PID 1>. */
static void boot_identity(char *out, size_t size)
{
    const char *env = getenv("GPUPROV_MOCK_NVML_BOOT_ID");
    if (env != NULL && env[0] != '\0') {
        snprintf(out, size, "%s", env);
        return;
    }
    char boot[64] = "unknown";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        if (fgets(boot, sizeof(boot), f) != NULL)
            boot[strcspn(boot, "\n")] = '\0';
        fclose(f);
    }
    /* Field 22 of /proc/1/stat: PID 1's start time; a restarted container has a new PID 1. */
    char stat[1024] = "";
    unsigned long long start = 0;
    f = fopen("/proc/1/stat", "r");
    if (f != NULL) {
        size_t got = fread(stat, 1, sizeof(stat) - 1, f);
        stat[got] = '\0';
        fclose(f);
        const char *p = strrchr(stat, ')');
        for (int field = 2; p != NULL && field < 22; field++)
            p = strchr(p + 1, ' ');
        if (p != NULL)
            start = strtoull(p + 1, NULL, 10);
    }
    snprintf(out, size, "%s/%llu", boot, start);
}

static const struct gi_profile *profile_by_id(const struct mig_table *t, unsigned int id)
{
    for (size_t i = 0; t != NULL && i < t->n_profiles; i++)
        if (t->profiles[i].id == id)
            return &t->profiles[i];
    return NULL;
}

static const struct gi_profile *profile_by_index(const struct mig_table *t, unsigned int index)
{
    for (size_t i = 0; t != NULL && i < t->n_profiles; i++)
        if (t->profiles[i].index == index)
            return &t->profiles[i];
    return NULL;
}

static void clear_instances(struct mig_device *m, unsigned int index)
{
    memset(m->gis, 0, sizeof(m->gis));
    for (unsigned int g = 0; g < MIG_MAX_GI; g++)
        m->gis[g].device = index;
}

/* The profile's own values: MIG mode and table, no instances. */
static void reset_from_profile(void)
{
    m_n = mock_device_count();
    if (m_n > MIG_MAX_DEVICES)
        m_n = MIG_MAX_DEVICES;
    for (unsigned int i = 0; i < m_n; i++) {
        struct mig_device *m = &m_devs[i];
        struct mock_device *d = mock_device_at(i);
        char name[64] = "";
        memset(m, 0, sizeof(*m));
        m->mode_error = mock_dev_uint(d, "mig_mode.current", &m->current);
        if (m->mode_error == NVML_SUCCESS)
            m->mode_error = mock_dev_uint(d, "mig_mode.pending", &m->pending);
        if (mock_dev_str(d, "mig_table", name, sizeof(name)) == NVML_SUCCESS)
            for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
                if (strcmp(tables[t].name, name) == 0)
                    m->table = &tables[t];
        if (mock_dev_str(d, "uuid", m->uuid, sizeof(m->uuid)) != NVML_SUCCESS)
            m->uuid[0] = '\0';
        clear_instances(m, i);
    }
}

static int write_state(void)
{
    char tmp[4200], boot[160];
    boot_identity(boot, sizeof(boot));
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", m_state_path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        mock_trace("cannot write MIG state %s: %s", tmp, strerror(errno));
        return -1;
    }
    fprintf(f, "# gpuprov mock NVML MIG state v1: GPU state shared by every process; see docs/mock-nvml.md\n");
    fprintf(f, "boot=%s\n", boot);
    for (unsigned int i = 0; i < m_n; i++) {
        const struct mig_device *m = &m_devs[i];
        if (m->mode_error != NVML_SUCCESS)
            continue;
        fprintf(f, "gpu.%u.uuid=%s\ngpu.%u.mig=%u %u\n", i, m->uuid, i, m->current, m->pending);
        for (unsigned int g = 0; g < MIG_MAX_GI; g++) {
            const struct gi_state *gi = &m->gis[g];
            if (!gi->used)
                continue;
            fprintf(f, "gpu.%u.gi=%u %u %u\n", i, gi->id, gi->profile->id, gi->start);
            for (unsigned int c = 0; c < MIG_MAX_CI; c++)
                if (gi->cis[c].used)
                    fprintf(f, "gpu.%u.ci=%u %u %u %u %u\n", i, gi->id, gi->cis[c].id, gi->cis[c].profile,
                            gi->cis[c].start, gi->cis[c].size);
        }
    }
    if (fclose(f) != 0 || rename(tmp, m_state_path) != 0) {
        mock_trace("cannot write MIG state %s: %s", m_state_path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    m_seen_valid = m_stat(m_state_path, &m_seen) == 0;
    return 0;
}

static struct gi_state *gi_by_id(struct mig_device *m, unsigned int id)
{
    for (unsigned int g = 0; g < MIG_MAX_GI; g++)
        if (m->gis[g].used && m->gis[g].id == id)
            return &m->gis[g];
    return NULL;
}

/* Read the state file over the profile's values; a file from another boot is a reboot. */
static void read_state(void)
{
    reset_from_profile();
    FILE *f = fopen(m_state_path, "r");
    if (f == NULL) {
        m_seen_valid = 0;
        return;
    }
    char line[512], boot[160], saved_boot[160] = "";
    int stale[MIG_MAX_DEVICES] = {0};
    boot_identity(boot, sizeof(boot));
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned int i = 0, a = 0, b = 0, c = 0, d = 0, e = 0;
        char value[128];
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "boot=", 5) == 0) {
            snprintf(saved_boot, sizeof(saved_boot), "%.159s", line + 5);
        } else if (sscanf(line, "gpu.%u.uuid=%127s", &i, value) == 2 && i < m_n) {
            stale[i] = strcmp(value, m_devs[i].uuid) != 0; /* another GPU in this slot */
        } else if (sscanf(line, "gpu.%u.mig=%u %u", &i, &a, &b) == 3 && i < m_n && !stale[i] &&
                   m_devs[i].mode_error == NVML_SUCCESS) {
            m_devs[i].current = a;
            m_devs[i].pending = b;
        } else if (sscanf(line, "gpu.%u.gi=%u %u %u", &i, &a, &b, &c) == 4 && i < m_n && !stale[i]) {
            const struct gi_profile *p = profile_by_id(m_devs[i].table, b);
            for (unsigned int g = 0; p != NULL && g < MIG_MAX_GI; g++) {
                struct gi_state *gi = &m_devs[i].gis[g];
                if (!gi->used) {
                    gi->used = 1, gi->id = a, gi->profile = p, gi->start = c;
                    break;
                }
            }
        } else if (sscanf(line, "gpu.%u.ci=%u %u %u %u %u", &i, &a, &b, &c, &d, &e) == 6 && i < m_n &&
                   !stale[i]) {
            struct gi_state *gi = gi_by_id(&m_devs[i], a);
            for (unsigned int k = 0; gi != NULL && k < MIG_MAX_CI; k++) {
                struct ci_state *ci = &gi->cis[k];
                if (!ci->used) {
                    ci->used = 1, ci->id = b, ci->profile = c, ci->start = d, ci->size = e, ci->gi = gi;
                    break;
                }
            }
        }
    }
    fclose(f);
    m_seen_valid = m_stat(m_state_path, &m_seen) == 0;
    if (strcmp(saved_boot, boot) != 0) {
        /* A reboot since the file was written: the GPUs lost every instance and applied the pending mode. */
        mock_trace("MIG state %s is from boot %s, this is %s: instances cleared", m_state_path, saved_boot, boot);
        for (unsigned int i = 0; i < m_n; i++) {
            clear_instances(&m_devs[i], i);
            m_devs[i].current = m_devs[i].pending;
        }
        write_state();
    }
}

void mock_mig_load(void)
{
    pthread_mutex_lock(&m_lock);
    state_path();
    read_state();
    pthread_mutex_unlock(&m_lock);
}

void mock_mig_unload(void)
{
    pthread_mutex_lock(&m_lock);
    m_n = 0;
    m_seen_valid = 0;
    pthread_mutex_unlock(&m_lock);
}

/* Pick up changes another process made to the state file since this one last read or wrote it. */
static void sync_state(void)
{
    struct stat now;
    int exists = m_stat(m_state_path, &now) == 0;
    if (!exists && !m_seen_valid)
        return;
    if (exists && m_seen_valid && now.st_ino == m_seen.st_ino && now.st_size == m_seen.st_size &&
        now.st_mtim.tv_sec == m_seen.st_mtim.tv_sec && now.st_mtim.tv_nsec == m_seen.st_mtim.tv_nsec)
        return;
    read_state();
}

/* Device checks plus the MIG state of the device, under m_lock (released by the caller). */
static nvmlReturn_t enter_device(nvmlDevice_t dev, struct mig_device **out)
{
    nvmlReturn_t ret = mock_check_device(dev);
    if (ret != NVML_SUCCESS)
        return ret;
    pthread_mutex_lock(&m_lock);
    sync_state();
    if (dev->index >= m_n) {
        pthread_mutex_unlock(&m_lock);
        return NVML_ERROR_UNKNOWN;
    }
    *out = &m_devs[dev->index];
    return NVML_SUCCESS;
}

#define LEAVE(value)                          \
    do {                                      \
        nvmlReturn_t leave_ret_ = (value);    \
        pthread_mutex_unlock(&m_lock);        \
        return leave_ret_;                    \
    } while (0)

/* MIG calls need a board with MIG (mode readable, a profile table) in MIG mode. */
static nvmlReturn_t require_mig(const struct mig_device *m)
{
    if (m->mode_error != NVML_SUCCESS)
        return m->mode_error;
    if (m->table == NULL || m->current != NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* MIG mode                                                           */
/* ------------------------------------------------------------------ */

MOCK_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *currentMode, unsigned int *pendingMode)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_device(d, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    if (m->mode_error != NVML_SUCCESS)
        LEAVE(m->mode_error);
    if (currentMode == NULL || pendingMode == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *currentMode = m->current;
    *pendingMode = m->pending;
    LEAVE(NVML_SUCCESS);
}

/* 1 when a process other than this one has /dev/nvidia<minor> open (what keeps a GPU from resetting).
 * Open files are matched by device and inode, so a container's own /dev/nvidia0 is not this GPU. */
static int gpu_held(nvmlDevice_t d)
{
    unsigned int minor = 0;
    char want[512], path[320];
    struct stat node, st;
    if (mock_dev_uint(d, "minor_number", &minor) != NVML_SUCCESS)
        minor = d->index;
    const char *dev_dir = getenv("GPUPROV_MOCK_NVML_DEV_DIR");
    snprintf(want, sizeof(want), "%s/nvidia%u", dev_dir != NULL && dev_dir[0] ? dev_dir : "/dev", minor);
    if (m_stat(want, &node) != 0)
        return 0;
    DIR *proc = opendir("/proc");
    if (proc == NULL)
        return 0;
    int held = 0;
    struct dirent *p;
    while (!held && (p = readdir(proc)) != NULL) {
        char *end = NULL;
        long pid = strtol(p->d_name, &end, 10);
        if (end == p->d_name || *end != '\0' || pid == (long)getpid())
            continue;
        snprintf(path, sizeof(path), "/proc/%ld/fd", pid);
        DIR *fds = opendir(path);
        if (fds == NULL)
            continue;
        struct dirent *fd;
        while (!held && (fd = readdir(fds)) != NULL) {
            if (fd->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "/proc/%ld/fd/%s", pid, fd->d_name);
            held = m_stat(path, &st) == 0 && st.st_dev == node.st_dev && st.st_ino == node.st_ino;
        }
        closedir(fds);
    }
    closedir(proc);
    return held;
}

MOCK_API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t d, unsigned int mode, nvmlReturn_t *activationStatus)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_device(d, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    if (m->mode_error != NVML_SUCCESS)
        LEAVE(m->mode_error);
    if (m->table == NULL)
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    if (activationStatus == NULL || mode > NVML_DEVICE_MIG_ENABLE)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned int g = 0; g < MIG_MAX_GI; g++)
        if (m->gis[g].used) /* NVML refuses to change the mode under existing instances */
            LEAVE(NVML_ERROR_IN_USE);
    unsigned int old_current = m->current, old_pending = m->pending;
    m->pending = mode;
    *activationStatus = NVML_SUCCESS;
    if (m->current != mode) {
        if (gpu_held(d))
            *activationStatus = NVML_ERROR_IN_USE; /* pending until the GPU is free and reset, or a reboot */
        else
            m->current = mode;
    }
    if ((m->current != old_current || m->pending != old_pending) && write_state() != 0) {
        m->current = old_current, m->pending = old_pending;
        LEAVE(NVML_ERROR_NO_PERMISSION);
    }
    mock_trace("nvmlDeviceSetMigMode(%u, %u) -> current %u pending %u", d->index, mode, m->current, m->pending);
    LEAVE(NVML_SUCCESS);
}

MOCK_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_device(d, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    if (count == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (m->mode_error == NVML_SUCCESS && m->table != NULL && m->current == NVML_DEVICE_MIG_ENABLE) {
        *count = MIG_COMPUTE_SLICES; /* seven 1g instances */
        LEAVE(NVML_SUCCESS);
    }
    pthread_mutex_unlock(&m_lock);
    return mock_dev_uint(d, "max_mig_device_count", count); /* the board's value outside MIG mode */
}

/* ------------------------------------------------------------------ */
/* GPU instances                                                      */
/* ------------------------------------------------------------------ */

static void fill_gi_info(const struct gi_profile *p, nvmlGpuInstanceProfileInfo_t *info)
{
    memset(info, 0, sizeof(*info));
    info->id = p->id;
    info->isP2pSupported = 0;
    info->sliceCount = p->slices;
    info->instanceCount = p->instances;
    info->multiprocessorCount = p->sms;
    info->copyEngineCount = p->ce;
    info->decoderCount = p->dec;
    info->encoderCount = p->enc;
    info->jpegCount = p->jpeg;
    info->ofaCount = p->ofa;
    info->memorySizeMB = p->memory_mib;
}

MOCK_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t d, unsigned int profile,
                                                          nvmlGpuInstanceProfileInfo_t *info)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_device(d, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    if (info == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if ((ret = require_mig(m)) != NVML_SUCCESS)
        LEAVE(ret);
    const struct gi_profile *p = profile_by_index(m->table, profile);
    if (p == NULL)
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    fill_gi_info(p, info);
    LEAVE(NVML_SUCCESS);
}

static nvmlReturn_t gi_info_v2(struct mig_device *m, const struct gi_profile *p, nvmlGpuInstanceProfileInfo_v2_t *info)
{
    nvmlGpuInstanceProfileInfo_t v1;
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlGpuInstanceProfileInfo_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t ret = require_mig(m);
    if (ret != NVML_SUCCESS)
        return ret;
    if (p == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    fill_gi_info(p, &v1);
    info->id = v1.id;
    info->isP2pSupported = v1.isP2pSupported;
    info->sliceCount = v1.sliceCount;
    info->instanceCount = v1.instanceCount;
    info->multiprocessorCount = v1.multiprocessorCount;
    info->copyEngineCount = v1.copyEngineCount;
    info->decoderCount = v1.decoderCount;
    info->encoderCount = v1.encoderCount;
    info->jpegCount = v1.jpegCount;
    info->ofaCount = v1.ofaCount;
    info->memorySizeMB = v1.memorySizeMB;
    snprintf(info->name, sizeof(info->name), "MIG %s", p->name);
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t d, unsigned int profile,
                                                           nvmlGpuInstanceProfileInfo_v2_t *info)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_device(d, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    LEAVE(gi_info_v2(m, profile_by_index(m->table, profile), info));
}

MOCK_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t d, unsigned int profileId,
                                                               nvmlGpuInstanceProfileInfo_v2_t *info)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_device(d, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    LEAVE(gi_info_v2(m, profile_by_id(m->table, profileId), info));
}

/* Memory slices and compute slices the existing GPU instances take. */
static void occupancy(const struct mig_device *m, unsigned int *memory_mask, unsigned int *compute)
{
    *memory_mask = 0;
    *compute = 0;
    for (unsigned int g = 0; g < MIG_MAX_GI; g++) {
        const struct gi_state *gi = &m->gis[g];
        if (!gi->used)
            continue;
        *memory_mask |= ((1u << gi->profile->size) - 1u) << gi->start;
        *compute += gi->profile->slices;
    }
}

static unsigned int count_of(const struct mig_device *m, const struct gi_profile *p)
{
    unsigned int n = 0;
    for (unsigned int g = 0; g < MIG_MAX_GI; g++)
        n += m->gis[g].used && m->gis[g].profile == p;
    return n;
}

/* Free placement start for p, or -1: the highest free one, so that instances created largest first
 * (as mig-parted and the gpuprov role do) leave the low placements that larger profiles need. */
static int free_start(const struct gi_profile *p, unsigned int memory_mask, unsigned int compute)
{
    if (compute + p->slices > MIG_COMPUTE_SLICES)
        return -1;
    for (int start = (int)p->last_start; start >= 0; start -= (int)p->step) {
        unsigned int want = ((1u << p->size) - 1u) << (unsigned int)start;
        if ((memory_mask & want) == 0 && (unsigned int)start + p->size <= MIG_MEMORY_SLICES)
            return start;
    }
    return -1;
}

MOCK_API nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t d, unsigned int profileId,
                                                               unsigned int *count)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_device(d, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    if (count == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if ((ret = require_mig(m)) != NVML_SUCCESS)
        LEAVE(ret);
    const struct gi_profile *p = profile_by_id(m->table, profileId);
    if (p == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    unsigned int mask, compute, n = 0, have = count_of(m, p);
    occupancy(m, &mask, &compute);
    int start;
    while (have + n < p->instances && (start = free_start(p, mask, compute)) >= 0) {
        mask |= ((1u << p->size) - 1u) << (unsigned int)start;
        compute += p->slices;
        n++;
    }
    *count = n;
    LEAVE(NVML_SUCCESS);
}

MOCK_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t d, unsigned int profileId,
                                                                   nvmlPlacement_t *placements, unsigned int *count)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_device(d, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    if (count == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if ((ret = require_mig(m)) != NVML_SUCCESS)
        LEAVE(ret);
    const struct gi_profile *p = profile_by_id(m->table, profileId);
    if (p == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    unsigned int n = p->last_start / p->step + 1;
    if (placements == NULL) {
        *count = n;
        LEAVE(NVML_SUCCESS);
    }
    if (*count < n) {
        *count = n;
        LEAVE(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned int i = 0; i < n; i++)
        placements[i].start = i * p->step, placements[i].size = p->size;
    *count = n;
    LEAVE(NVML_SUCCESS);
}

MOCK_API nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t d, unsigned int profileId, nvmlGpuInstance_t *out)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_device(d, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    if (out == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if ((ret = require_mig(m)) != NVML_SUCCESS)
        LEAVE(ret);
    const struct gi_profile *p = profile_by_id(m->table, profileId);
    if (p == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    unsigned int mask, compute;
    occupancy(m, &mask, &compute);
    int start = count_of(m, p) < p->instances ? free_start(p, mask, compute) : -1;
    if (start < 0)
        LEAVE(NVML_ERROR_INSUFFICIENT_RESOURCES);
    struct gi_state *slot = NULL;
    unsigned int id = 1;
    while (gi_by_id(m, id) != NULL)
        id++;
    for (unsigned int g = 0; g < MIG_MAX_GI && slot == NULL; g++)
        if (!m->gis[g].used)
            slot = &m->gis[g];
    if (slot == NULL)
        LEAVE(NVML_ERROR_INSUFFICIENT_RESOURCES);
    memset(slot->cis, 0, sizeof(slot->cis));
    slot->used = 1, slot->id = id, slot->profile = p, slot->start = (unsigned int)start;
    if (write_state() != 0) {
        slot->used = 0;
        LEAVE(NVML_ERROR_NO_PERMISSION);
    }
    *out = slot;
    LEAVE(NVML_SUCCESS);
}

/* A GPU instance handle this library handed out and that still exists; its device in *m. */
static nvmlReturn_t enter_gi(nvmlGpuInstance_t gi, struct mig_device **m)
{
    const char *lo = (const char *)&m_devs[0].gis[0];
    const char *hi = (const char *)&m_devs[MIG_MAX_DEVICES - 1].gis[MIG_MAX_GI];
    if (!mock_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (gi == NULL || (const char *)gi < lo || (const char *)gi >= hi)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&m_lock);
    sync_state();
    if (!gi->used || gi->device >= m_n || gi < m_devs[gi->device].gis || gi >= m_devs[gi->device].gis + MIG_MAX_GI)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *m = &m_devs[gi->device];
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gi)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_gi(gi, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    for (unsigned int c = 0; c < MIG_MAX_CI; c++)
        if (gi->cis[c].used)
            LEAVE(NVML_ERROR_IN_USE); /* compute instances first */
    gi->used = 0;
    if (write_state() != 0) {
        gi->used = 1;
        LEAVE(NVML_ERROR_NO_PERMISSION);
    }
    LEAVE(NVML_SUCCESS);
}

MOCK_API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t d, unsigned int profileId, nvmlGpuInstance_t *gis,
                                                unsigned int *count)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_device(d, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    if (count == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if ((ret = require_mig(m)) != NVML_SUCCESS)
        LEAVE(ret);
    const struct gi_profile *p = profile_by_id(m->table, profileId);
    if (p == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    unsigned int n = 0;
    for (unsigned int g = 0; g < MIG_MAX_GI; g++)
        if (m->gis[g].used && m->gis[g].profile == p) {
            if (gis == NULL)
                LEAVE(NVML_ERROR_INVALID_ARGUMENT);
            gis[n++] = &m->gis[g];
        }
    *count = n;
    LEAVE(NVML_SUCCESS);
}

MOCK_API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t d, unsigned int id, nvmlGpuInstance_t *gi)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_device(d, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    if (gi == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if ((ret = require_mig(m)) != NVML_SUCCESS)
        LEAVE(ret);
    struct gi_state *found = gi_by_id(m, id);
    if (found == NULL)
        LEAVE(NVML_ERROR_NOT_FOUND);
    *gi = found;
    LEAVE(NVML_SUCCESS);
}

MOCK_API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gi, nvmlGpuInstanceInfo_t *info)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_gi(gi, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    if (info == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    info->device = mock_device_at(gi->device);
    info->id = gi->id;
    info->profileId = gi->profile->id;
    info->placement.start = gi->start;
    info->placement.size = gi->profile->size;
    LEAVE(NVML_SUCCESS);
}

/* ------------------------------------------------------------------ */
/* Compute instances                                                  */
/* ------------------------------------------------------------------ */

/* Compute slices of CI profile `index` inside gi; 0 when the GI cannot hold it. */
static unsigned int ci_slices(const struct gi_state *gi, unsigned int index)
{
    if (index >= N_CI_INDEX)
        return 0;
    unsigned int s = ci_slices_by_index[index];
    if (s == 0 || s > gi->profile->slices || (s == 7 && gi->profile->slices != 7))
        return 0;
    return s;
}

static nvmlReturn_t ci_info_v2(const struct gi_state *gi, unsigned int profile, unsigned int eng,
                               nvmlComputeInstanceProfileInfo_v2_t *info)
{
    unsigned int s = ci_slices(gi, profile);
    if (eng != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED || s == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    const struct gi_profile *p = gi->profile;
    info->id = profile;
    info->sliceCount = s;
    info->instanceCount = p->slices / s;
    info->multiprocessorCount = p->sms / p->slices * s;
    info->sharedCopyEngineCount = p->ce;
    info->sharedDecoderCount = p->dec;
    info->sharedEncoderCount = p->enc;
    info->sharedJpegCount = p->jpeg;
    info->sharedOfaCount = p->ofa;
    if (s == p->slices)
        snprintf(info->name, sizeof(info->name), "MIG %s", p->name);
    else
        snprintf(info->name, sizeof(info->name), "MIG %uc.%s", s, p->name);
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gi, unsigned int profile,
                                                                    unsigned int engProfile,
                                                                    nvmlComputeInstanceProfileInfo_v2_t *info)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_gi(gi, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    if (info == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (info->version != nvmlComputeInstanceProfileInfo_v2)
        LEAVE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    LEAVE(ci_info_v2(gi, profile, engProfile, info));
}

MOCK_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gi, unsigned int profile,
                                                                   unsigned int engProfile,
                                                                   nvmlComputeInstanceProfileInfo_t *info)
{
    struct mig_device *m;
    nvmlComputeInstanceProfileInfo_v2_t v2;
    nvmlReturn_t ret = enter_gi(gi, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    if (info == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    memset(&v2, 0, sizeof(v2));
    if ((ret = ci_info_v2(gi, profile, engProfile, &v2)) != NVML_SUCCESS)
        LEAVE(ret);
    memcpy(info, &v2.id, sizeof(*info)); /* v1 is v2 without version and name */
    LEAVE(NVML_SUCCESS);
}

static struct ci_state *ci_by_id(struct gi_state *gi, unsigned int id)
{
    for (unsigned int c = 0; c < MIG_MAX_CI; c++)
        if (gi->cis[c].used && gi->cis[c].id == id)
            return &gi->cis[c];
    return NULL;
}

/* First free start (aligned to size) for a CI of `size` slices in gi, or -1. */
static int ci_free_start(const struct gi_state *gi, unsigned int size)
{
    unsigned int used = 0;
    for (unsigned int c = 0; c < MIG_MAX_CI; c++)
        if (gi->cis[c].used)
            used |= ((1u << gi->cis[c].size) - 1u) << gi->cis[c].start;
    for (unsigned int start = 0; start + size <= gi->profile->slices; start += size)
        if ((used & (((1u << size) - 1u) << start)) == 0)
            return (int)start;
    return -1;
}

MOCK_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gi, unsigned int profileId,
                                                                        unsigned int *count)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_gi(gi, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    unsigned int s = ci_slices(gi, profileId);
    if (count == NULL || s == 0)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    struct gi_state copy = *gi;
    unsigned int n = 0;
    int start;
    for (unsigned int c = 0; c < MIG_MAX_CI && (start = ci_free_start(&copy, s)) >= 0; c++) {
        for (unsigned int k = 0; k < MIG_MAX_CI; k++)
            if (!copy.cis[k].used) {
                copy.cis[k].used = 1, copy.cis[k].start = (unsigned int)start, copy.cis[k].size = s;
                break;
            }
        n++;
    }
    *count = n;
    LEAVE(NVML_SUCCESS);
}

MOCK_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gi, unsigned int profileId,
                                                           nvmlComputeInstance_t *out)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_gi(gi, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    unsigned int s = ci_slices(gi, profileId);
    if (out == NULL || s == 0)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    int start = ci_free_start(gi, s);
    if (start < 0)
        LEAVE(NVML_ERROR_INSUFFICIENT_RESOURCES);
    unsigned int id = 0;
    while (ci_by_id(gi, id) != NULL)
        id++;
    struct ci_state *slot = NULL;
    for (unsigned int c = 0; c < MIG_MAX_CI && slot == NULL; c++)
        if (!gi->cis[c].used)
            slot = &gi->cis[c];
    if (slot == NULL)
        LEAVE(NVML_ERROR_INSUFFICIENT_RESOURCES);
    slot->used = 1, slot->id = id, slot->profile = profileId, slot->start = (unsigned int)start, slot->size = s;
    slot->gi = gi;
    if (write_state() != 0) {
        slot->used = 0;
        LEAVE(NVML_ERROR_NO_PERMISSION);
    }
    *out = slot;
    LEAVE(NVML_SUCCESS);
}

static nvmlReturn_t enter_ci(nvmlComputeInstance_t ci, struct mig_device **m)
{
    const char *lo = (const char *)&m_devs[0].gis[0];
    const char *hi = (const char *)&m_devs[MIG_MAX_DEVICES - 1].gis[MIG_MAX_GI];
    if (!mock_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (ci == NULL || (const char *)ci < lo || (const char *)ci >= hi)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&m_lock);
    sync_state();
    if (!ci->used || ci->gi == NULL || !ci->gi->used || ci->gi->device >= m_n)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *m = &m_devs[ci->gi->device];
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t ci)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_ci(ci, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    ci->used = 0;
    if (write_state() != 0) {
        ci->used = 1;
        LEAVE(NVML_ERROR_NO_PERMISSION);
    }
    LEAVE(NVML_SUCCESS);
}

MOCK_API nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gi, unsigned int profileId,
                                                         nvmlComputeInstance_t *cis, unsigned int *count)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_gi(gi, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    if (count == NULL || ci_slices(gi, profileId) == 0)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    unsigned int n = 0;
    for (unsigned int c = 0; c < MIG_MAX_CI; c++)
        if (gi->cis[c].used && gi->cis[c].profile == profileId) {
            if (cis == NULL)
                LEAVE(NVML_ERROR_INVALID_ARGUMENT);
            cis[n++] = &gi->cis[c];
        }
    *count = n;
    LEAVE(NVML_SUCCESS);
}

MOCK_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gi, unsigned int id,
                                                            nvmlComputeInstance_t *ci)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_gi(gi, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    if (ci == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    struct ci_state *found = ci_by_id(gi, id);
    if (found == NULL)
        LEAVE(NVML_ERROR_NOT_FOUND);
    *ci = found;
    LEAVE(NVML_SUCCESS);
}

MOCK_API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t ci, nvmlComputeInstanceInfo_t *info)
{
    struct mig_device *m;
    nvmlReturn_t ret = enter_ci(ci, &m);
    if (ret != NVML_SUCCESS)
        return ret;
    if (info == NULL)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    info->device = mock_device_at(ci->gi->device);
    info->gpuInstance = ci->gi;
    info->id = ci->id;
    info->profileId = ci->profile;
    info->placement.start = ci->start;
    info->placement.size = ci->size;
    LEAVE(NVML_SUCCESS);
}
