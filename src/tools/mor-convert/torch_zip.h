/* torch_zip.h - read a torch.save file (pytorch_model.bin): a ZIP archive
 * whose entries are stored uncompressed:
 *     <prefix>/data.pkl      the pickled state dict (see pickle.h)
 *     <prefix>/data/<key>    the bytes of storage <key>
 *     <prefix>/byteorder     "little" (newer files), <prefix>/version, ...
 * The prefix is arbitrary (the file's stem when it was saved). ZIP64 records
 * are understood; compressed entries, multi-disk archives and big-endian
 * checkpoints are rejected. CRC-32 of every entry used is verified. */
#ifndef CV_TORCH_ZIP_H
#define CV_TORCH_ZIP_H
#include <stddef.h>
#include <stdint.h>
#include "checkpoint.h"

/* Add every tensor of the archive buf[0..size) to ck; the caller finishes. */
int torch_zip_parse(checkpoint *ck, const uint8_t *buf, size_t size, char *err, size_t errcap);

#endif
