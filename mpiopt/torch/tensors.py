"""Tensors as the arrays mpiopt's reducers and compressors take, without copies where torch allows.

A CPU tensor is seen as a numpy array (``Tensor.numpy()`` shares its memory); a CUDA tensor as a CuPy array
(``__cuda_array_interface__``, also shared).  numpy has no bfloat16 and no half-precision reducers, so a
tensor of another floating dtype goes through a float32 copy, written back by :func:`write_back`.
"""
import numpy as np
import torch

DIRECT = (torch.float32, torch.float64)


def as_array(tensor):
    """(the array, whether it is a copy) for a contiguous tensor: a view for float32 and float64."""
    tensor = tensor.detach()
    copy = tensor.dtype not in DIRECT or not tensor.is_contiguous()
    if copy:
        tensor = tensor.to(torch.float32 if tensor.dtype not in DIRECT else tensor.dtype).contiguous()
    if tensor.is_cuda:
        import cupy
        return cupy.asarray(tensor), copy
    return tensor.numpy(), copy


def write_back(array, tensor):
    """``tensor[...] = array`` (numpy or CuPy), converting to the tensor's dtype and device."""
    source = torch.as_tensor(array, device=tensor.device) if tensor.is_cuda else torch.from_numpy(np.asarray(array))
    tensor.copy_(source.reshape(tensor.shape))
