"""Images in: from paths, bytes, arrays and Pillow images to the rows a model reads.

One module per job: ``limits`` (how big an image may be), ``sniff`` (format and size
from the first bytes), ``decode`` (files and bytes to pixels, upright), ``pixels``
(arrays to 0..255 pixels of the model's size and channels), ``prepare`` (items to
the model's rows, on the mnist or the photo path). Photos and scans of digits on
paper go through three stages, one module each: ``page`` (the paper and the ink on
it; ``rules`` takes out ruled lines and underlines), ``digit`` (one digit framed as
MNIST's) and ``number`` (a number read digit by digit).
"""

from .limits import DEFAULT_MAX_IMAGE_PIXELS, max_image_pixels, set_max_image_pixels
from .pixels import as_array, check_channel_order, is_one_image, is_pil_image
from .prepare import MODES, Named, Prepared, Rows, check_batch_size, label_of, prepare, prepare_number
from .sniff import image_size

__all__ = [
    "DEFAULT_MAX_IMAGE_PIXELS",
    "MODES",
    "Named",
    "Prepared",
    "Rows",
    "as_array",
    "check_batch_size",
    "check_channel_order",
    "image_size",
    "is_one_image",
    "is_pil_image",
    "label_of",
    "max_image_pixels",
    "prepare",
    "prepare_number",
    "set_max_image_pixels",
]
