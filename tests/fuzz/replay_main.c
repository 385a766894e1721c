/* SPDX-License-Identifier: MIT */
/*
 * Corpus replayer for builds without libFuzzer (gcc): feeds every file of the given directories
 * (or files) to LLVMFuzzerTestOneInput once, so seeds and past crashes run in every ctest.
 */
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/mu.h"

#include "common/mu_banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    struct mu_err err;
    size_t len = 0;
    char *data = mu_file_read(path, 16u << 20, &len, &err);
    if (!data) {
        (void)fprintf(stderr, "replay: %s\n", err.msg);
        return -1;
    }
    (void)LLVMFuzzerTestOneInput((const uint8_t *)data, len);
    free(data);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        DIR *dir;
        struct dirent *de;
        if (stat(argv[i], &st) != 0) {
            (void)fprintf(stderr, "replay: cannot stat '%s'\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (replay_file(argv[i]) != 0)
                return 1;
            files++;
            continue;
        }
        dir = opendir(argv[i]);
        if (!dir)
            return 1;
        while ((de = readdir(dir)) != NULL) {
            char path[4096];
            if (de->d_name[0] == '.')
                continue;
            if (mu_snprintf(path, sizeof(path), "%s/%s", argv[i], de->d_name) != 0)
                continue;
            if (replay_file(path) != 0) {
                (void)closedir(dir);
                return 1;
            }
            files++;
        }
        (void)closedir(dir);
    }
    (void)printf("replayed %d input(s)\n", files);
    return files > 0 ? 0 : 1;
}
