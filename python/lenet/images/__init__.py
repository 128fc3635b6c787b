"""Images in: from paths, bytes, arrays and Pillow images to the rows a model reads.

Photos and scans of digits on paper go through three stages, one module each:
``page`` (the paper and the ink on it), ``digit`` (one digit framed as MNIST's) and
``number`` (a number read digit by digit).
"""
