/* TensorBoard event files: scalars, as Megatron's SummaryWriter writes them.
 *
 * The file is a TFRecord stream (little-endian u64 length, masked CRC32C of the
 * length, the record, masked CRC32C of the record) of Event protocol buffers: first
 * {wall_time, file_version "brain.Event:2"}, then one {wall_time, step, summary {value
 * {tag, simple_value}}} per scalar. Written through mg_outfile: the file appears whole
 * at mg_tb_close, never partly. */
#ifndef MGRAPH_TENSORBOARD_H
#define MGRAPH_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>

#include "mgraph/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_tb_writer mg_tb_writer;

/* Starts dir/events.out.tfevents.<seconds>.<host>.<pid> (dir is created if missing,
 * one level, as SummaryWriter does). MG_ERR_IO naming the path on failure. */
int mg_tb_open(const char *dir, mg_tb_writer **out, mg_error *err);
/* Appends one scalar. MG_ERR_IO when the stream has failed (disk full...). */
int mg_tb_scalar(mg_tb_writer *w, const char *tag, float value, int64_t step, mg_error *err);
/* Appends one text summary as SummaryWriter.add_text(tag, text, step) does (tag
 * "<tag>/text_summary", the text plugin; TensorBoard's Text tab shows it); Megatron writes
 * each argument this way. Texts over 15000 bytes are MG_ERR_INVALID. */
int mg_tb_text(mg_tb_writer *w, const char *tag, const char *text, int64_t step, mg_error *err);
/* The target path (valid until close/abort). */
const char *mg_tb_path(const mg_tb_writer *w);
/* Flushes and puts the file in place; frees w whatever the outcome. */
int mg_tb_close(mg_tb_writer *w, mg_error *err);
/* Discards the file; frees w. NULL is a no-op. */
void mg_tb_abort(mg_tb_writer *w);

/* CRC-32C (Castagnoli), and TFRecord's mask of it: rotate right 15, add 0xa282ead8. */
uint32_t mg_crc32c(const void *data, size_t len);
uint32_t mg_tfrecord_mask(uint32_t crc);

#ifdef __cplusplus
}
#endif
#endif
