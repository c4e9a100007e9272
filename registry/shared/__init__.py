"""Code two or more packs use: the pure-PyTorch kernels of ``mmcv._ext`` (``mmcv_ext``),
``torch_scatter``'s (``scatter``) and Sparse4D's (``deformable_aggregation``), and the
helpers that edit an installed function from its own source (``rewrite``).

Not a pack: it declares nothing and importing any module here registers no patch, so
that a pack using a kernel never registers another pack's patches (the contract test,
tests/packs/test_pack_contract.py, checks both). Its modules import torch: a pack imports
them from a patch function, when the patch's target is imported.
"""
