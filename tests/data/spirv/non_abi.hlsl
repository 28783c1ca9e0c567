// Descriptors the peak ABI cannot feed: a cbuffer (uniform buffer), a global without `static` (the $Globals
// uniform buffer), a buffer in set 1, an array of 3 textures, a texture; and a
// storage buffer with no [[vk::binding]] (glslang numbers it itself). numthreads(8, 4, 2).
cbuffer Extra : register(b3) { uint scale; };
uint loose;
[[vk::binding(0, 1)]] RWStructuredBuffer<float> OtherSet;
[[vk::binding(4)]] Texture2D<float> Many[3];
[[vk::binding(6)]] Texture2D<float> Tex;
RWStructuredBuffer<uint> Plain;

[numthreads(8, 4, 2)]
void main(uint3 id : SV_DispatchThreadID)
{
    OtherSet[id.x] = Many[id.y % 3].Load(int3(id.xy, 0)) + Tex.Load(int3(id.xy, 0)) + float(scale + loose);
    Plain[id.x] = id.y;
}
