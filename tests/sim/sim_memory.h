/*
 * sim_memory.h: the device memory model shared by the simulated CUDA driver (cuda_sim.c) and the
 * simulated HIP runtime (hip_sim.c). Each library compiles its own copy and keeps one
 * `struct sim_memory`, so their states are separate; the API layer on top only checks arguments,
 * finds the calling thread's device and maps the status below to its own error codes.
 *
 * What the model holds (every function takes the model's one mutex itself):
 *   devices      capacity per device, charged with the rounded size of device, managed and VMM
 *                physical memory, plus the context's own bytes once the device has a context.
 *   windows      fake device addresses: device d bumps through [device_base + d * 1 TiB, +1 TiB)
 *                and reuses a freed address for the next allocation of the same rounded size
 *                (last freed, first reused). An optional "legacy" window below 4 GiB serves
 *                entry points whose device pointers are 32 bits wide.
 *   host         managed and pinned memory are real, page-aligned host memory (programs touch it);
 *                pinned memory is charged to the host capacity, managed memory to its device.
 *   registered   host ranges pinned in place (cuMemHostRegister): tracked, never charged.
 *   streams      opaque numbered handles, never reused; default pools are pool_base + device.
 *   VMM          physical handles (charged when created, returned when released and unmapped),
 *                address reservations in their own window (never charged) and the mappings
 *                between them; see sim_vmm.c for the rules.
 */
#ifndef GPUMEMPROF_SIM_MEMORY_H
#define GPUMEMPROF_SIM_MEMORY_H

#include "sim_tables.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_ROUNDING 512                     /* allocation granularity, a power of two */
#define SIM_HOST_ALIGN 4096                  /* managed/pinned memory is page aligned, as real */
#define SIM_DEVICE_WINDOW 0x10000000000ULL   /* 1 TiB of fake address space per device */
#define SIM_MAX_DEVICES 64                   /* 64 windows of 1 TiB */
#define SIM_VMM_GRANULARITY ((size_t)2 << 20) /* 2 MiB: VMM sizes, offsets and addresses */
#define SIM_STREAM_STEP 0x100                /* stream n is stream_base + n * SIM_STREAM_STEP */
#define SIM_HANDLE_STEP 0x10                 /* VMM handle n is handle_base + n * SIM_HANDLE_STEP */
#define SIM_PROP_BYTES 64                    /* room for an allocation-properties struct */

/* Results of the model. The values are the codes the CUDA driver, the CUDA runtime and HIP all
 * use for these conditions, so a library may return them as they are. */
enum sim_status {
    SIM_OK = 0,
    SIM_INVALID = 1,       /* a bad argument or a range the rules forbid */
    SIM_OUT_OF_MEMORY = 2, /* capacity (or an address window) exhausted */
    SIM_INVALID_DEVICE = 101,
    SIM_INVALID_HANDLE = 400, /* unknown stream or VMM handle */
    SIM_ALREADY_REGISTERED = 712,
    SIM_NOT_REGISTERED = 713
};

/* Where a library's fake addresses and handles live, and which variables configure it. */
struct sim_layout {
    const char *tag;         /* prefix of messages on stderr: "simcuda" */
    const char *capacity_env, *devices_env, *host_capacity_env;
    const char *context_env; /* bytes a device's context takes; NULL: contexts are free */
    const char *consequence; /* what a malformed variable makes the library do, for the message */
    unsigned long long default_capacity, default_host_capacity;
    uintptr_t device_base;              /* device d: device_base + d * SIM_DEVICE_WINDOW */
    uintptr_t legacy_base, legacy_end;  /* 32-bit addresses for v1 entry points; 0, 0 = none */
    uintptr_t vmm_base, vmm_end;        /* address reservations */
    uintptr_t stream_base, pool_base, handle_base;
};

struct sim_window {
    uintptr_t next, end;        /* bump pointer: next never-used address; end of the window */
    struct sim_free_lists free; /* freed addresses by rounded size */
};

struct sim_device {
    size_t used;     /* rounded bytes charged, the context's included */
    int has_context; /* the context exists (and its bytes are charged) */
    struct sim_window window;
};

struct sim_registration {
    uintptr_t base;
    size_t size;
    int device;
};

struct sim_handle {
    uint64_t id;
    size_t size;
    int device;
    int released;    /* the owner released it; it lives on while mapped */
    size_t mappings; /* live mappings of it */
    unsigned char prop[SIM_PROP_BYTES];
};

struct sim_reservation {
    uintptr_t base;
    size_t size;
    size_t mappings;
};

struct sim_mapping {
    uintptr_t va;
    size_t size;
    uint64_t handle;
};

struct sim_memory {
    const struct sim_layout *layout;
    int ok; /* configuration read and valid */
    size_t capacity, host_capacity, context_bytes;
    int devices;

    pthread_mutex_t lock; /* guards everything below */
    struct sim_device dev[SIM_MAX_DEVICES];
    struct sim_window legacy;
    size_t host_used;
    struct sim_live_table live;
    uintptr_t *streams; /* live stream handles, unordered */
    size_t n_streams, streams_cap;
    uintptr_t streams_made;
    struct sim_registration *regs;
    size_t n_regs, regs_cap;
    /* VMM (sim_vmm.c): few entries in practice, so plain arrays searched linearly. */
    struct sim_handle *handles;
    size_t n_handles, handles_cap;
    uint64_t handles_made;
    struct sim_reservation *resv;
    size_t n_resv, resv_cap;
    uintptr_t vmm_next;
    struct sim_mapping *maps;
    size_t n_maps, maps_cap;
};

#define SIM_MEMORY_INIT(layout_ptr) {.layout = (layout_ptr), .lock = PTHREAD_MUTEX_INITIALIZER}

/* What a pointer is (sim_pointer_query). */
struct sim_pointer {
    int kind;       /* enum sim_kind */
    int device;     /* the device it lives on or was allocated from */
    uintptr_t base; /* start of the block, registration or mapping holding it */
    size_t size;
};

/* Reads the layout's variables; call once (pthread_once). 0 if valid, else -1 (said on stderr). */
int sim_memory_configure(struct sim_memory *m);

/* Creates the device's context if it has none, charging its bytes. SIM_OUT_OF_MEMORY if they do
 * not fit. Memory placed on a device creates its context the same way. */
enum sim_status sim_context_create(struct sim_memory *m, int device);
int sim_context_exists(struct sim_memory *m, int device);

/* Fake device memory on `device` (valid) of `size` > 0 bytes; legacy: from the 32-bit window.
 * *out = 0 on failure. */
enum sim_status sim_device_alloc(struct sim_memory *m, int device, size_t size, int legacy,
                                 uintptr_t *out);
/* Real host memory: SIM_MANAGED (charged to `device`) or SIM_PINNED_HOST (host capacity;
 * `device` is only remembered). size > 0. *out = NULL on failure. */
enum sim_status sim_host_alloc(struct sim_memory *m, int kind, int device, size_t size,
                               void **out);
/* Frees the live block starting at p if its kind is in `kinds` (a mask of 1 << enum sim_kind);
 * p == 0 is a no-op. Anything else (unknown, interior, wrong family): SIM_INVALID, no change. */
enum sim_status sim_free(struct sim_memory *m, uintptr_t p, unsigned kinds);
#define SIM_FREES(kind) (1u << (kind))

/* Capacity and what is left on a device; either out-pointer may be NULL. */
void sim_mem_info(struct sim_memory *m, int device, size_t *free_bytes, size_t *total_bytes);
/* Bytes charged on the device (context included); 0 when it has no context. */
size_t sim_device_used(struct sim_memory *m, int device);

enum sim_status sim_stream_create(struct sim_memory *m, uintptr_t *out);
enum sim_status sim_stream_destroy(struct sim_memory *m, uintptr_t stream);
int sim_stream_live(struct sim_memory *m, uintptr_t stream);
/* The default pool of a device, and the device of a pool handle (-1 if it is none). */
uintptr_t sim_pool_of(struct sim_memory *m, int device);
int sim_pool_device(struct sim_memory *m, uintptr_t pool);

/* Pins [p, p + size) in place. Overlapping a registered range: SIM_ALREADY_REGISTERED. */
enum sim_status sim_host_register(struct sim_memory *m, uintptr_t p, size_t size, int device);
/* p must start a registered range: else SIM_NOT_REGISTERED. */
enum sim_status sim_host_unregister(struct sim_memory *m, uintptr_t p);

/* Live allocations are found by their start address; registered ranges and VMM mappings by any
 * address inside. Anything else: SIM_INVALID. */
enum sim_status sim_pointer_query(struct sim_memory *m, uintptr_t p, struct sim_pointer *out);

/* VMM (sim_vmm.c). `prop` is the caller's allocation-properties struct, kept as bytes. */
enum sim_status sim_vmm_create(struct sim_memory *m, size_t size, int device, const void *prop,
                               size_t prop_size, uint64_t *out);
enum sim_status sim_vmm_release(struct sim_memory *m, uint64_t handle);
enum sim_status sim_vmm_properties(struct sim_memory *m, uint64_t handle, void *prop,
                                   size_t prop_size);
enum sim_status sim_vmm_reserve(struct sim_memory *m, size_t size, size_t alignment,
                                uintptr_t hint, uintptr_t *out);
enum sim_status sim_vmm_free(struct sim_memory *m, uintptr_t base, size_t size);
enum sim_status sim_vmm_map(struct sim_memory *m, uintptr_t va, size_t size, size_t offset,
                            uint64_t handle);
enum sim_status sim_vmm_unmap(struct sim_memory *m, uintptr_t va, size_t size);
/* SIM_OK if every byte of [va, va + size) is mapped. */
enum sim_status sim_vmm_check_mapped(struct sim_memory *m, uintptr_t va, size_t size);
/* The VMM mapping holding p, with the lock held by the caller (sim_pointer_query). */
int sim_vmm_lookup_locked(struct sim_memory *m, uintptr_t p, struct sim_pointer *out);

/* Internal to the model (sim_memory.c, sim_vmm.c): with the lock held. */
enum sim_status sim_charge_locked(struct sim_memory *m, int device, size_t bytes);
int sim_grow_array(void **array, size_t *cap, size_t len, size_t elem);

#endif /* GPUMEMPROF_SIM_MEMORY_H */
