"""Vulkan compute for the HLSL backend, on the `vulkan` cffi binding: buffers, pipelines, dispatch, timing (the
devices themselves are found by vulkan_devices.py).

Everything is synchronous: each operation records one command buffer, submits it and waits on a fence with a
finite timeout. A timeout or VK_ERROR_DEVICE_LOST marks the device lost; every later call raises KernelFault, so
the worker replies once and exits (the parent starts a fresh one). Nothing here is shared between threads.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from peak_mcp.backends.base import KernelFault
from peak_mcp.backends.vulkan_devices import (
    CORE_FEATURES,
    MIN_API,
    V11_FEATURES,
    V12_FEATURES,
    PhysicalDevice,
    create_instance,
    load_binding,
    physical_devices,
)
from peak_mcp.core.errors import busy_note

WHOLE_SIZE = 0xFFFFFFFFFFFFFFFF  # VK_WHOLE_SIZE as an unsigned 64-bit value (the binding defines it as -1)


STAGING_CHUNK = 64 << 20  # host<->device copies go through a staging buffer of at most this many bytes


MAX_BUFFER_SETS = 4  # descriptor sets per submit: the timed loop rotates input sets


EXIT_STATUS_DEVICE_LOST = 3  # the worker's exit status for "device context unusable"


_unusable_devices = 0  # see _exit_at_once_if_a_device_hung


@dataclass
class Buffer:
    handle: Any
    memory: Any
    size: int
    mapped: np.ndarray | None = None  # staging buffers stay mapped


BufferView = tuple[Buffer, int]  # a buffer bound from a byte offset


@dataclass
class Pipeline:
    module: Any
    set_layout: Any
    layout: Any
    pipeline: Any
    bindings: int
    push_bytes: int


class PipelineError(Exception):
    """The driver refused the SPIR-V (reported to the agent as a compile failure)."""


class VulkanDevice:
    """One logical device with one compute queue; owns every Vulkan object it creates."""

    def __init__(self, index: int, *, fence_timeout_s: float = 30.0,
                 l2_lookup: Callable[[str], int | None] | None = None) -> None:
        self.vk = vk = load_binding()
        self.fence_timeout_s = float(fence_timeout_s)
        self.lost: str | None = None  # why the device became unusable
        self._pipelines: list[Pipeline] = []
        self._buffers: list[Buffer] = []
        self.instance = create_instance(vk)
        devices = physical_devices(vk, self.instance)
        if not devices:
            raise RuntimeError("no Vulkan device with a compute queue")
        if not 0 <= index < len(devices):
            raise RuntimeError(f"Vulkan device index {index} is out of range: {len(devices)} compute device(s): "
                               + ", ".join(f"{d.index}: {d.name}" for d in devices))
        self.physical = phys = devices[index]
        if not phys.usable:
            raise RuntimeError(f"{phys.name} supports Vulkan {phys.properties['api_version']}; "
                               f"the HLSL backend needs {MIN_API[0]}.{MIN_API[1]} or newer")
        self.device = self._create_device(phys)
        self.queue = vk.vkGetDeviceQueue(self.device, phys.queue_family, 0)
        self.command_pool = vk.vkCreateCommandPool(self.device, vk.VkCommandPoolCreateInfo(
            flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, queueFamilyIndex=phys.queue_family), None)
        self.cmd = vk.vkAllocateCommandBuffers(self.device, vk.VkCommandBufferAllocateInfo(
            commandPool=self.command_pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
        self.fence = vk.vkCreateFence(self.device, vk.VkFenceCreateInfo(), None)
        self.descriptor_pool = vk.vkCreateDescriptorPool(self.device, vk.VkDescriptorPoolCreateInfo(
            maxSets=MAX_BUFFER_SETS, poolSizeCount=1,
            pPoolSizes=[vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                descriptorCount=64 * MAX_BUFFER_SETS)]),
            None)
        self.query_pool: Any = None
        self.query_capacity = 0
        self.memory_props = vk.vkGetPhysicalDeviceMemoryProperties(phys.handle)
        self.staging: Buffer | None = None
        # Python copies, never cffi sub-structs: a nested struct does not keep its parent's memory alive.
        self.timestamp_period_ns = float(phys.properties["timestamp_period_ns"])
        self.timestamps = phys.timestamp_bits > 0 and self.timestamp_period_ns > 0
        self.timestamp_mask = (1 << min(phys.timestamp_bits, 64)) - 1
        # Scratch buffer whose fill evicts the last-level cache before each timed dispatch.
        # L2 is not a Vulkan property: without a profile assume a large one on GPUs, and keep CPU runs quick.
        default_flush = (16 << 20) if phys.properties["is_software"] else (128 << 20)
        l2_bytes = l2_lookup(phys.name) if l2_lookup else None
        self.flush_bytes = max(4, int(2 * l2_bytes if l2_bytes else default_flush) // 4 * 4)
        self.scratch = self._create_buffer(self.flush_bytes, device_local=True)
        self._barrier_all = vk.VkMemoryBarrier(
            srcAccessMask=vk.VK_ACCESS_MEMORY_WRITE_BIT,
            dstAccessMask=vk.VK_ACCESS_MEMORY_READ_BIT | vk.VK_ACCESS_MEMORY_WRITE_BIT)

    # --- setup -----------------------------------------------------------------------------------------------
    def _create_device(self, phys: PhysicalDevice) -> Any:
        vk = self.vk
        on = {k: v for k, v in phys.features.items() if v}
        f12 = vk.VkPhysicalDeviceVulkan12Features(**{k: 1 for k in V12_FEATURES if k in on})
        f11 = vk.VkPhysicalDeviceVulkan11Features(pNext=f12, **{k: 1 for k in V11_FEATURES if k in on})
        core = vk.VkPhysicalDeviceFeatures(**{k: 1 for k in CORE_FEATURES if k in on})
        f2 = vk.VkPhysicalDeviceFeatures2(pNext=f11, features=core)
        queue = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=phys.queue_family, queueCount=1, pQueuePriorities=[1.0])
        info = vk.VkDeviceCreateInfo(pNext=f2, queueCreateInfoCount=1, pQueueCreateInfos=[queue])
        return vk.vkCreateDevice(phys.handle, info, None)

    def _memory_type(self, type_bits: int, want: int, prefer: int = 0) -> int:
        props = self.memory_props
        candidates = [i for i in range(props.memoryTypeCount)
                      if type_bits & (1 << i) and props.memoryTypes[i].propertyFlags & want == want]
        if not candidates:
            raise RuntimeError(f"no Vulkan memory type with flags 0x{want:x} for this buffer")
        preferred = [i for i in candidates if props.memoryTypes[i].propertyFlags & prefer == prefer]
        return (preferred or candidates)[0]

    def _create_buffer(self, size: int, *, device_local: bool) -> Buffer:
        vk = self.vk
        usage = vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
        if device_local:
            usage |= vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
        handle = vk.vkCreateBuffer(self.device, vk.VkBufferCreateInfo(
            size=size, usage=usage, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
        try:
            req = vk.vkGetBufferMemoryRequirements(self.device, handle)
            if device_local:
                index = self._memory_type(req.memoryTypeBits, 0, vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)
            else:  # host-cached memory makes reads back to numpy fast
                index = self._memory_type(req.memoryTypeBits, vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
                                          | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                          vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
            memory = vk.vkAllocateMemory(self.device, vk.VkMemoryAllocateInfo(
                allocationSize=req.size, memoryTypeIndex=index), None)
        except Exception:
            vk.vkDestroyBuffer(self.device, handle, None)
            raise
        vk.vkBindBufferMemory(self.device, handle, memory, 0)
        buf = Buffer(handle, memory, size)
        if not device_local:
            buf.mapped = np.frombuffer(vk.vkMapMemory(self.device, memory, 0, size, 0), dtype=np.uint8)
        return buf

    def _destroy_buffer(self, buf: Buffer) -> None:
        if buf.mapped is not None:
            buf.mapped = None
            self.vk.vkUnmapMemory(self.device, buf.memory)
        self.vk.vkDestroyBuffer(self.device, buf.handle, None)
        self.vk.vkFreeMemory(self.device, buf.memory, None)

    # --- submission ------------------------------------------------------------------------------------------
    def _check_alive(self) -> None:
        if self.lost:
            raise KernelFault("the Vulkan device is unusable after an earlier fault or hang; the worker must restart")

    def mark_lost(self, why: str, kind: str = "kernel_fault") -> KernelFault:
        global _unusable_devices
        if not self.lost:
            _unusable_devices += 1
        self.lost = why
        return KernelFault(why, kind)

    @contextmanager
    def _recording(self) -> Iterator[Any]:
        """Record into the one command buffer; a Python error mid-recording leaves it reset, not half-recorded."""
        vk = self.vk
        self._check_alive()
        vk.vkResetCommandBuffer(self.cmd, 0)
        vk.vkBeginCommandBuffer(self.cmd, vk.VkCommandBufferBeginInfo(
            flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
        try:
            self._barrier(self.cmd)  # earlier submissions' writes are visible to everything recorded here
            yield self.cmd
            # Make device writes visible to host reads of mapped staging memory after the fence.
            host = vk.VkMemoryBarrier(srcAccessMask=vk.VK_ACCESS_MEMORY_WRITE_BIT,
                                      dstAccessMask=vk.VK_ACCESS_HOST_READ_BIT)
            vk.vkCmdPipelineBarrier(self.cmd, vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, vk.VK_PIPELINE_STAGE_HOST_BIT,
                                    0, 1, [host], 0, None, 0, None)
            vk.vkEndCommandBuffer(self.cmd)
        except BaseException:
            vk.vkResetCommandBuffer(self.cmd, 0)  # legal from the recording state
            raise

    def _barrier(self, cmd: Any) -> None:
        vk = self.vk
        vk.vkCmdPipelineBarrier(cmd, vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                                0, 1, [self._barrier_all], 0, None, 0, None)

    def _submit_and_wait(self, progress: Callable[[], int] | None = None) -> None:
        """Submit the recorded command buffer and wait. `progress` counts finished dispatches: as long as it
        grows the wait goes on, so only a dispatch that runs longer than fence_timeout_s counts as hung."""
        vk = self.vk
        vk.vkResetFences(self.device, 1, [self.fence])
        try:
            vk.vkQueueSubmit(self.queue, 1, [vk.VkSubmitInfo(commandBufferCount=1, pCommandBuffers=[self.cmd])],
                             self.fence)
        except vk.VkErrorDeviceLost:
            raise self.mark_lost("VK_ERROR_DEVICE_LOST on submit: the device was lost") from None
        deadline = time.monotonic() + self.fence_timeout_s
        done = 0
        while True:
            slice_s = max(0.0, min(deadline - time.monotonic(), 0.5 if progress else self.fence_timeout_s))
            try:
                vk.vkWaitForFences(self.device, 1, [self.fence], vk.VK_TRUE, int(slice_s * 1e9))
                return
            except vk.VkTimeout:
                pass
            except vk.VkErrorDeviceLost:
                raise self.mark_lost(
                    "VK_ERROR_DEVICE_LOST: the kernel crashed the device (out-of-bounds access through a bad "
                    "index, or a fault the driver could not contain)") from None
            if progress is not None:
                now_done = progress()
                if now_done > done:
                    done, deadline = now_done, time.monotonic() + self.fence_timeout_s
            if time.monotonic() >= deadline:
                raise self.mark_lost(
                    f"the kernel did not finish within {self.fence_timeout_s:g} s, the fence timeout "
                    f"PEAK_MCP_VK_FENCE_TIMEOUT_S sets. Either one launch takes longer than that on this device "
                    f"(a CPU Vulkan driver, large sizes, or other work competing for the cores{busy_note()}): "
                    f"raise PEAK_MCP_VK_FENCE_TIMEOUT_S and PEAK_MCP_JOB_TIMEOUT or use smaller sizes; or it never "
                    "terminates (a loop whose exit condition is never met, a barrier not every thread reaches). "
                    "The device is left busy; the worker restarts", kind="timeout")

    # --- memory ----------------------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> Buffer:
        self._check_alive()
        try:
            buf = self._create_buffer(max(4, (int(nbytes) + 3) // 4 * 4), device_local=True)
        except (self.vk.VkErrorOutOfDeviceMemory, self.vk.VkErrorOutOfHostMemory):
            raise MemoryError(f"out of device memory allocating a {nbytes:,}-byte buffer on "
                              f"{self.physical.name}") from None
        self._buffers.append(buf)
        return buf

    def free(self, buf: Buffer) -> None:
        if buf in self._buffers and not self.lost:
            self._buffers.remove(buf)
            self._destroy_buffer(buf)

    def _staging(self, nbytes: int) -> Buffer:
        want = min(max(nbytes, 1 << 20), STAGING_CHUNK)
        if self.staging is None or self.staging.size < want:
            if self.staging is not None:
                self._destroy_buffer(self.staging)
                self.staging = None
            self.staging = self._create_buffer(want, device_local=False)
        return self.staging

    def write(self, buf: Buffer, data: np.ndarray, offset: int = 0) -> None:
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if offset + raw.nbytes > buf.size:
            raise ValueError(f"write of {raw.nbytes} bytes at {offset} into a {buf.size}-byte buffer")
        staging = self._staging(raw.nbytes)
        assert staging.mapped is not None
        for start in range(0, raw.nbytes, staging.size):
            chunk = raw[start:start + staging.size]
            staging.mapped[: chunk.nbytes] = chunk
            with self._recording() as cmd:
                self.vk.vkCmdCopyBuffer(cmd, staging.handle, buf.handle, 1, [self.vk.VkBufferCopy(
                    srcOffset=0, dstOffset=offset + start, size=chunk.nbytes)])
            self._submit_and_wait()

    def read(self, buf: Buffer, nbytes: int, offset: int = 0) -> np.ndarray:
        if offset + nbytes > buf.size:
            raise ValueError(f"read of {nbytes} bytes at {offset} from a {buf.size}-byte buffer")
        out = np.empty(nbytes, np.uint8)
        staging = self._staging(nbytes)
        assert staging.mapped is not None
        for start in range(0, nbytes, staging.size):
            size = min(staging.size, nbytes - start)
            with self._recording() as cmd:
                self.vk.vkCmdCopyBuffer(cmd, buf.handle, staging.handle, 1, [self.vk.VkBufferCopy(
                    srcOffset=offset + start, dstOffset=0, size=size)])
            self._submit_and_wait()
            out[start:start + size] = staging.mapped[:size]
        return out

    # --- pipelines -------------------------------------------------------------------------------------------
    def create_pipeline(self, spirv: bytes, entry: str, bindings: int, push_bytes: int) -> Pipeline:
        """A compute pipeline whose layout has `bindings` storage buffers (set 0) and `push_bytes` of push
        constants. Raises PipelineError when the driver rejects the module."""
        vk = self.vk
        self._check_alive()
        made: list[Callable[[], None]] = []
        try:
            module = vk.vkCreateShaderModule(self.device, vk.VkShaderModuleCreateInfo(
                codeSize=len(spirv), pCode=spirv), None)
            made.append(lambda: vk.vkDestroyShaderModule(self.device, module, None))
            entries = [vk.VkDescriptorSetLayoutBinding(
                binding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=1,
                stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT) for i in range(bindings)]
            set_layout = vk.vkCreateDescriptorSetLayout(self.device, vk.VkDescriptorSetLayoutCreateInfo(
                bindingCount=len(entries), pBindings=entries or None), None)
            made.append(lambda: vk.vkDestroyDescriptorSetLayout(self.device, set_layout, None))
            ranges = [vk.VkPushConstantRange(stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=push_bytes)]
            layout = vk.vkCreatePipelineLayout(self.device, vk.VkPipelineLayoutCreateInfo(
                setLayoutCount=1, pSetLayouts=[set_layout], pushConstantRangeCount=1 if push_bytes else 0,
                pPushConstantRanges=ranges if push_bytes else None), None)
            made.append(lambda: vk.vkDestroyPipelineLayout(self.device, layout, None))
            stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=module,
                                                       pName=entry)
            pipeline = vk.vkCreateComputePipelines(self.device, vk.VK_NULL_HANDLE, 1, [
                vk.VkComputePipelineCreateInfo(stage=stage, layout=layout)], None)[0]
        except vk.VkErrorDeviceLost:
            raise self.mark_lost("VK_ERROR_DEVICE_LOST while creating the pipeline") from None
        except Exception as exc:
            for undo in reversed(made):
                undo()
            raise PipelineError(f"the Vulkan driver rejected the shader: {type(exc).__name__} {exc}".strip()) \
                from None
        made_pipeline = Pipeline(module, set_layout, layout, pipeline, bindings, push_bytes)
        self._pipelines.append(made_pipeline)
        return made_pipeline

    def destroy_pipeline(self, pipe: Pipeline) -> None:
        if pipe not in self._pipelines or self.lost:
            return
        self._pipelines.remove(pipe)
        vk = self.vk
        vk.vkDestroyPipeline(self.device, pipe.pipeline, None)
        vk.vkDestroyPipelineLayout(self.device, pipe.layout, None)
        vk.vkDestroyDescriptorSetLayout(self.device, pipe.set_layout, None)
        vk.vkDestroyShaderModule(self.device, pipe.module, None)

    def _descriptor_sets(self, pipe: Pipeline, buffer_sets: list[list[BufferView]]) -> list[Any]:
        """One descriptor set per buffer set; every earlier submit has finished, so the pool can be reset."""
        vk = self.vk
        if len(buffer_sets) > MAX_BUFFER_SETS:
            raise ValueError(f"at most {MAX_BUFFER_SETS} buffer sets per submit")
        vk.vkResetDescriptorPool(self.device, self.descriptor_pool, 0)
        sets = vk.vkAllocateDescriptorSets(self.device, vk.VkDescriptorSetAllocateInfo(
            descriptorPool=self.descriptor_pool, descriptorSetCount=len(buffer_sets),
            pSetLayouts=[pipe.set_layout] * len(buffer_sets)))
        writes = [vk.VkWriteDescriptorSet(
            dstSet=dset, dstBinding=i, descriptorCount=1, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            pBufferInfo=[vk.VkDescriptorBufferInfo(buffer=buffers[i][0].handle, offset=buffers[i][1],
                                                   range=WHOLE_SIZE)])
            for dset, buffers in zip(sets, buffer_sets, strict=True) for i in range(pipe.bindings)]
        if writes:
            vk.vkUpdateDescriptorSets(self.device, len(writes), writes, 0, None)
        return list(sets)

    def _bind(self, cmd: Any, pipe: Pipeline, dset: Any, push: bytes) -> None:
        vk = self.vk
        vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipe.pipeline)
        vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipe.layout, 0, 1, [dset], 0, None)
        if pipe.push_bytes:
            data = self.vk.ffi.new("char[]", push[: pipe.push_bytes])
            vk.vkCmdPushConstants(cmd, pipe.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, pipe.push_bytes, data)

    def _fill_poison(self, cmd: Any, regions: list[tuple[Buffer, int, int]]) -> None:
        for buf, offset, nbytes in regions:  # vkCmdFillBuffer writes whole words
            if nbytes >= 4:
                self.vk.vkCmdFillBuffer(cmd, buf.handle, offset, nbytes // 4 * 4, 0xFFFFFFFF)

    def _fill_scratch(self, cmd: Any, value: int) -> None:
        self.vk.vkCmdFillBuffer(cmd, self.scratch.handle, 0, WHOLE_SIZE, value & 0xFFFFFFFF)

    # --- dispatch --------------------------------------------------------------------------------------------
    def dispatch(self, pipe: Pipeline, buffers: list[BufferView], push: bytes, groups: tuple[int, int, int]) -> None:
        dset = self._descriptor_sets(pipe, [buffers])[0]
        with self._recording() as cmd:
            self._bind(cmd, pipe, dset, push)
            self.vk.vkCmdDispatch(cmd, *groups)
        self._submit_and_wait()

    def time_dispatches(self, pipe: Pipeline, buffer_sets: list[list[BufferView]], push: bytes,
                        groups: tuple[int, int, int], reps: int, cold_cache: bool,
                        poison: list[list[tuple[Buffer, int, int]]] | None = None) -> list[float]:
        """Milliseconds per dispatch, dispatch i on buffer_sets[i % len], from timestamp queries (or host clocks
        where the queue has none). Before dispatch i, poison[i % len] regions (buffer, offset, bytes) are filled
        with 0xFF bytes."""
        if not self.timestamps:
            return self._time_on_host(pipe, buffer_sets, push, groups, reps, cold_cache, poison)
        vk = self.vk
        self._ensure_queries(2 * reps)
        dsets = self._descriptor_sets(pipe, buffer_sets)
        with self._recording() as cmd:
            vk.vkCmdResetQueryPool(cmd, self.query_pool, 0, 2 * reps)
            for rep in range(reps):
                self._bind(cmd, pipe, dsets[rep % len(dsets)], push)
                self._fill_poison(cmd, poison[rep % len(poison)] if poison else [])
                if cold_cache:
                    self._fill_scratch(cmd, rep + 1)
                self._barrier(cmd)  # the fill and the previous dispatch are done before this one starts
                # BOTTOM_OF_PIPE: written once all earlier commands completed, i.e. just before the dispatch runs.
                vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, self.query_pool, 2 * rep)
                vk.vkCmdDispatch(cmd, *groups)
                vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, self.query_pool, 2 * rep + 1)
        self._submit_and_wait(progress=lambda: self._finished_queries(2 * reps))
        ticks = vk.ffi.new("uint64_t[]", 2 * reps)
        vk.vkGetQueryPoolResults(self.device, self.query_pool, 0, 2 * reps, 16 * reps, ticks, 8,
                                 vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
        return [((ticks[2 * i + 1] - ticks[2 * i]) & self.timestamp_mask) * self.timestamp_period_ns / 1e6
                for i in range(reps)]

    def _finished_queries(self, count: int) -> int:
        """How many timestamps are already written, without waiting (for hang detection during long loops)."""
        vk = self.vk
        data = vk.ffi.new("uint64_t[]", 2 * count)
        try:
            vk.vkGetQueryPoolResults(self.device, self.query_pool, 0, count, 16 * count, data, 16,
                                     vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WITH_AVAILABILITY_BIT)
        except vk.VkNotReady:
            pass
        except vk.VkErrorDeviceLost:
            return 0
        return sum(1 for i in range(count) if data[2 * i + 1])

    def _ensure_queries(self, count: int) -> None:
        if self.query_capacity >= count:
            return
        vk = self.vk
        if self.query_pool is not None:
            vk.vkDestroyQueryPool(self.device, self.query_pool, None)
            self.query_pool = None
        capacity = max(count, 256)
        self.query_pool = vk.vkCreateQueryPool(self.device, vk.VkQueryPoolCreateInfo(
            queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=capacity), None)
        self.query_capacity = capacity

    def _time_on_host(self, pipe: Pipeline, buffer_sets: list[list[BufferView]], push: bytes,
                      groups: tuple[int, int, int], reps: int, cold_cache: bool,
                      poison: list[list[tuple[Buffer, int, int]]] | None) -> list[float]:
        times = []
        for rep in range(reps):
            with self._recording() as cmd:
                self._fill_poison(cmd, poison[rep % len(poison)] if poison else [])
                if cold_cache:
                    self._fill_scratch(cmd, rep + 1)
            self._submit_and_wait()
            dset = self._descriptor_sets(pipe, [buffer_sets[rep % len(buffer_sets)]])[0]
            with self._recording() as cmd:
                self._bind(cmd, pipe, dset, push)
                self.vk.vkCmdDispatch(cmd, *groups)
            started = time.perf_counter()
            self._submit_and_wait()
            times.append((time.perf_counter() - started) * 1e3)
        return times

    # --- teardown --------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Destroy everything, unless the device is lost or hung: waiting on it could block forever."""
        if self.lost or getattr(self, "device", None) is None:
            return
        vk = self.vk
        try:
            vk.vkDeviceWaitIdle(self.device)
        except Exception:
            return
        for pipe in list(self._pipelines):
            self.destroy_pipeline(pipe)
        for buf in self._buffers:
            self._destroy_buffer(buf)
        self._buffers.clear()
        for buf in (self.staging, self.scratch):
            if buf is not None:
                self._destroy_buffer(buf)
        self.staging = None
        if self.query_pool is not None:
            vk.vkDestroyQueryPool(self.device, self.query_pool, None)
        vk.vkDestroyDescriptorPool(self.device, self.descriptor_pool, None)
        vk.vkDestroyFence(self.device, self.fence, None)
        vk.vkDestroyCommandPool(self.device, self.command_pool, None)
        vk.vkDestroyDevice(self.device, None)
        vk.vkDestroyInstance(self.instance, None)
        self.device = None


@atexit.register
def _exit_at_once_if_a_device_hung() -> None:
    """With a dispatch still running (a hung kernel), NVIDIA's driver blocks the process's normal exit forever
    (seen on an H100: the worker replied, returned, and never ended); lavapipe exits. So skip the rest of the
    interpreter's and the C library's teardown; the kernel driver still reclaims the GPU context."""
    if _unusable_devices:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_STATUS_DEVICE_LOST)
