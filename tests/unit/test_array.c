/* SPDX-License-Identifier: MIT */
/*
 * Array specs as Slurm reads them (issue #43; queue/array.c): a table whose expected sets of
 * indices, throttles and steps are Slurm 22.05's (src/common/slurm_protocol_defs.c,
 * slurm_parse_array_tok, and SLURM_ARRAY_TASK_STEP in src/slurmctld/job_mgr.c), and the bounds
 * of normalising.  The syntax's bad-input table is test_spec.c's test_array.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/mu.h"
#include "queue/queue.h"

#include "common/mu_banned.h"

static void assert_prefix(const char *msg, const char *prefix)
{
    if (strncmp(msg, prefix, strlen(prefix)) != 0)
        fail_msg("message: \"%s\"\nexpected prefix: \"%s\"", msg, prefix);
}

/* Array specs as Slurm 22.05 takes them (issue #43): its set of indices, its throttle and its
 * SLURM_ARRAY_TASK_STEP (the first ":S" written).  "text" stays as submitted. */
static void test_array_slurm(void **state)
{
    static const struct {
        const char *text;
        const char *indices; /* the set, increasing */
        int throttle;
        int step;
    } table[] = {
        { "0-3", "0,1,2,3", 0, 1 },
        { "5,1,3", "1,3,5", 0, 1 },
        { "1,1,2", "1,2", 0, 1 },
        { "1, 3", "1,3", 0, 1 },
        { "1,,2", "1,2", 0, 1 },
        { "1,2,", "1,2", 0, 1 },
        { ",1", "1", 0, 1 },
        { "0-9,5-12", "0,1,2,3,4,5,6,7,8,9,10,11,12", 0, 1 },
        { "7-9,0-2", "0,1,2,7,8,9", 0, 1 },
        { "0-9:3,1", "0,1,3,6,9", 0, 3 },
        { "0-10:2,1-9:2", "0,1,2,3,4,5,6,7,8,9,10", 0, 2 },
        { "0-12:4,0-12:6", "0,4,6,8,12", 0, 4 },
        { "3,0-6:3", "0,3,6", 0, 3 },
        { "2-2", "2", 0, 1 },
        { "0-9%0", "0,1,2,3,4,5,6,7,8,9", 0, 1 },
        { "0-3%", "0,1,2,3", 0, 1 },
        { "0-3%2", "0,1,2,3", 2, 1 },
        { "0-3,%2", "0,1,2,3", 2, 1 },
        { "0- 3: 1", "0,1,2,3", 0, 1 },
    };
    struct queue_array a;
    struct mu_err err;
    (void)state;

    for (size_t i = 0; i < MU_ARRAY_LEN(table); i++) {
        char got[256];
        size_t n = 0;
        if (queue_array_parse(table[i].text, &a, &err) != 0)
            fail_msg("'%s': %s", table[i].text, err.msg);
        got[0] = '\0';
        for (int64_t pos = 0; pos < a.count && n < sizeof(got); pos++) {
            int64_t index = queue_array_index(&a, pos);
            assert_int_equal(queue_array_position(&a, index), pos);
            n += (size_t)snprintf(got + n, sizeof(got) - n, "%s%lld", pos ? "," : "",
                                  (long long)index);
        }
        if (strcmp(got, table[i].indices) != 0)
            fail_msg("'%s': got {%s}, Slurm has {%s}", table[i].text, got, table[i].indices);
        assert_int_equal(a.throttle, table[i].throttle);
        assert_int_equal(a.step, table[i].step);
        assert_string_equal(a.text, table[i].text);
    }
    /* Normalised compactly: one range for a million indices written twice over. */
    assert_int_equal(queue_array_parse("0-999999,0-999999:7,5", &a, &err), 0);
    assert_int_equal(a.nranges, 1);
    assert_int_equal(a.count, 1000000);
    /* Steps that overlap are walked, but never more than QUEUE_ARRAY_COUNT_MAX indices. */
    assert_int_equal(queue_array_parse("0-9999999:2,1-9999999:2", &a, &err), -1);
    assert_prefix(err.msg, "array: items of different steps overlap over more than 1000000");
}

/* An element id never takes blanks, though an array spec may. */
static void test_element_id_strict(void **state)
{
    char base[QUEUE_JOB_ID_MAX];
    int64_t index = 0;
    (void)state;

    assert_false(queue_job_id_split("1732270000123-0_ 5", base, sizeof(base), &index));
    assert_true(queue_job_id_split("1732270000123-0_5", base, sizeof(base), &index));
    assert_int_equal(index, 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_array_slurm),
        cmocka_unit_test(test_element_id_strict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
