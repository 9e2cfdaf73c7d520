/* A program built against an installed ragged through pkg-config (tests/py/test_install.py):
 * prints the header's version, loads the model in argv[1], tokenizes argv[2] and writes its
 * embedding as raw float32 to argv[3]. Exit 0, or 1 with the library's message on stderr. */
#include <ragged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	rg_model_params p = rg_model_params_default();
	const rg_model_info *info;
	rg_model *m;
	rg_status st;
	int32_t *ids = NULL, cu[2];
	size_t n = 0;
	float *out = NULL;
	FILE *f;
	int rc = 1;

	if (argc != 4) {
		fprintf(stderr, "usage: use_ragged MODEL_DIR TEXT OUT.f32\n");
		return 2;
	}
	printf("version %s %s\n", RAGGED_VERSION, rg_status_name(RG_ERR_IO));
	m = rg_model_load(argv[1], &p, &st);
	if (!m) {
		fprintf(stderr, "%s: %s\n", rg_status_name(st), rg_last_error());
		return 1;
	}
	info = rg_model_get_info(m);
	if (rg_model_tokenize(m, argv[2], strlen(argv[2]), false, &ids, &n) != RG_OK)
		goto out_free;
	printf("ids");
	for (size_t i = 0; i < n; i++)
		printf(" %d", ids[i]);
	printf("\n");
	cu[0] = 0;
	cu[1] = (int32_t)n;
	out = malloc((size_t)info->output_dim * sizeof(*out));
	if (!out || rg_model_embed(m, ids, cu, 1, out) != RG_OK)
		goto out_free;
	if (!(f = fopen(argv[3], "wb")))
		goto out_free;
	rc = fwrite(out, sizeof(*out), (size_t)info->output_dim, f) != (size_t)info->output_dim;
	rc |= fclose(f) != 0;
out_free:
	if (rc)
		fprintf(stderr, "%s\n", rg_last_error());
	free(out);
	free(ids);
	rg_model_free(m);
	return rc;
}
