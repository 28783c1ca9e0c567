"""Which Vulkan devices there are: the `vulkan` cffi binding loaded, an instance made, and each physical device with a
compute queue described (type, vendor, API version, features, limits) and numbered, discrete GPUs first."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# VkPhysicalDeviceType -> our word, and the preference order used to number devices (discrete GPUs first).
DEVICE_TYPES = {0: "other", 1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}


_PREFERENCE = {2: 0, 1: 1, 3: 2, 4: 3, 0: 4}


VENDORS = {0x10DE: "nvidia", 0x1002: "amd", 0x8086: "intel", 0x13B5: "arm", 0x5143: "qualcomm", 0x10005: "mesa"}


MIN_API = (1, 2)  # the compilers target vulkan1.2 (SPIR-V 1.5)


# Features a shader may need (SPIR-V capabilities map onto these); enabled at device creation when supported.
CORE_FEATURES = ("shaderInt64", "shaderInt16", "shaderFloat64")


V11_FEATURES = ("storageBuffer16BitAccess", "uniformAndStorageBuffer16BitAccess", "storagePushConstant16")


V12_FEATURES = ("shaderFloat16", "shaderInt8", "storageBuffer8BitAccess", "uniformAndStorageBuffer8BitAccess",
                "storagePushConstant8", "shaderBufferInt64Atomics", "shaderSharedInt64Atomics", "scalarBlockLayout",
                "vulkanMemoryModel", "vulkanMemoryModelDeviceScope", "bufferDeviceAddress", "hostQueryReset")


def load_binding() -> Any:
    """Import the binding; it dlopens libvulkan.so.1 at import and raises OSError when the loader is absent."""
    import vulkan

    return vulkan


def _version(packed: int) -> tuple[int, int, int]:
    return packed >> 22, (packed >> 12) & 0x3FF, packed & 0xFFF


def _text(vk: Any, chars: Any) -> str:
    return vk.ffi.string(chars).decode(errors="replace")


def create_instance(vk: Any) -> Any:
    app = vk.VkApplicationInfo(pApplicationName="peak-mcp", applicationVersion=1, pEngineName="peak-mcp",
                               engineVersion=1, apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))
    return vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=app), None)


@dataclass
class PhysicalDevice:
    """A compute-capable physical device and what we read off it."""

    handle: Any
    index: int  # position in preference order, the `index` a worker is opened with
    name: str
    api: tuple[int, int, int]
    queue_family: int
    timestamp_bits: int
    features: dict[str, bool]
    properties: dict[str, Any] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        return self.api[:2] >= MIN_API


def physical_devices(vk: Any, instance: Any) -> list[PhysicalDevice]:
    """Compute-capable devices, discrete GPUs first, then integrated, virtual and CPU (lavapipe) ones."""
    found = []
    for order, handle in enumerate(vk.vkEnumeratePhysicalDevices(instance)):
        props = vk.vkGetPhysicalDeviceProperties(handle)
        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(handle)
        compute = [(i, f) for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT]
        if not compute:
            continue
        # A family with timestamps wins; among those the first (on NVIDIA the graphics+compute family 0).
        # Plain ints are kept: cffi elements of `families` do not keep that array alive.
        family, timestamp_bits = max(((i, int(f.timestampValidBits)) for i, f in compute),
                                     key=lambda item: (item[1] > 0, -item[0]))
        found.append((_PREFERENCE.get(props.deviceType, 9), order, handle, props, family, timestamp_bits))
    found.sort(key=lambda item: (item[0], item[1]))
    return [_describe(vk, index, handle, props, family, bits)
            for index, (_, _, handle, props, family, bits) in enumerate(found)]


def _describe(vk: Any, index: int, handle: Any, props: Any, family: int, timestamp_bits: int) -> PhysicalDevice:
    limits = props.limits  # read only while `props` is alive: a nested cffi struct does not own its memory
    api = _version(props.apiVersion)
    name = str(props.deviceName)
    features: dict[str, bool] = {}
    properties: dict[str, Any] = {
        "device_type": DEVICE_TYPES.get(props.deviceType, "other"),
        "vendor_id": f"0x{props.vendorID:04x}",
        "vendor": VENDORS.get(props.vendorID, "unknown"),
        "device_id": f"0x{props.deviceID:04x}",
        "api_version": ".".join(map(str, api)),
        "driver_version_raw": props.driverVersion,
        "timestamp_period_ns": float(limits.timestampPeriod),
        "timestamp_valid_bits": timestamp_bits,
        "timestamp_compute_and_graphics": bool(limits.timestampComputeAndGraphics),
        "queue_family": family,
        "max_compute_workgroup_size": list(limits.maxComputeWorkGroupSize),
        "max_compute_workgroup_count": list(limits.maxComputeWorkGroupCount),
        "max_compute_workgroup_invocations": int(limits.maxComputeWorkGroupInvocations),
        "max_shared_memory": int(limits.maxComputeSharedMemorySize),
        "max_storage_buffer_range": int(limits.maxStorageBufferRange),
        "max_push_constants_size": int(limits.maxPushConstantsSize),
        "max_bound_descriptor_sets": int(limits.maxBoundDescriptorSets),
    }
    if api[:2] >= MIN_API:
        f12 = vk.VkPhysicalDeviceVulkan12Features()
        f11 = vk.VkPhysicalDeviceVulkan11Features(pNext=f12)
        f2 = vk.VkPhysicalDeviceFeatures2(pNext=f11)
        vk.vkGetPhysicalDeviceFeatures2(handle, f2)
        features.update({k: bool(getattr(f2.features, k)) for k in CORE_FEATURES})
        features.update({k: bool(getattr(f11, k)) for k in V11_FEATURES})
        features.update({k: bool(getattr(f12, k)) for k in V12_FEATURES})
        p12 = vk.VkPhysicalDeviceVulkan12Properties()
        p11 = vk.VkPhysicalDeviceVulkan11Properties(pNext=p12)
        vk.vkGetPhysicalDeviceProperties2(handle, vk.VkPhysicalDeviceProperties2(pNext=p11))
        properties.update({
            "driver_name": _text(vk, p12.driverName),
            "driver_info": _text(vk, p12.driverInfo),
            "driver_id": int(p12.driverID),
            "subgroup_size": int(p11.subgroupSize),
            "subgroup_operations": int(p11.subgroupSupportedOperations),
            # The same 16 bytes as CUDA's device UUID on NVIDIA: how a worker finds this GPU among CUDA's.
            "device_uuid": bytes(p11.deviceUUID).hex(),
        })
    properties["shader_float16"] = features.get("shaderFloat16", False)
    properties["storage_buffer_16bit_access"] = features.get("storageBuffer16BitAccess", False)
    properties["f16_supported"] = properties["shader_float16"] and properties["storage_buffer_16bit_access"]
    lowered = name.lower()
    properties["is_software"] = props.deviceType == 4 or any(
        word in lowered for word in ("llvmpipe", "lavapipe", "swiftshader"))
    if "llvmpipe" in lowered:
        # Measured here (Mesa 22.3): llvmpipe's guard against endless loops ends a shader invocation after about
        # 65535 loop iterations in total, across all its loops, and carries on with wrong values.
        properties["caveats"] = [
            "CPU Vulkan (lavapipe): timings say nothing about GPU performance",
            "llvmpipe stops each shader invocation's loops after ~65535 iterations in total (Mesa's guard "
            "against endless loops): kernels whose threads loop longer give wrong results here, and endless "
            "loops end instead of hanging"]
    properties["vulkan_features"] = dict(features)
    return PhysicalDevice(handle, index, name, api, family, timestamp_bits, features, properties)
