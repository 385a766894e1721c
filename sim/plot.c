/* SPDX-License-Identifier: MIT */
/*
 * Plots of a comparison (sim.h): gnuplot draws them because it is one Debian package and reads
 * plain columns, so muster-sim links no graphics library.  The data and the script are written
 * first and kept, so that without gnuplot a person still has them (and is told how to draw
 * them), and with it can restyle the plots by editing plots.gp.  gnuplot runs through
 * posix_spawnp with a fixed argv: no shell sees the directory name.
 */
#include "sim/internal.h"

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/mu_banned.h"

extern char **environ;

static FILE *open_in(const char *dir, const char *name, struct mu_err *err)
{
    char path[4096];
    FILE *f;
    if (mu_snprintf(path, sizeof(path), "%s/%s", dir, name) != 0) {
        mu_errf(err, MU_E_INVAL, "plot directory name too long");
        return NULL;
    }
    f = fopen(path, "w");
    if (!f)
        mu_errf(err, MU_E_IO, "cannot write '%s': %s", path, strerror(errno));
    return f;
}

static int close_checked(FILE *f, const char *name, struct mu_err *err)
{
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad)
        return mu_errf(err, MU_E_IO, "cannot write '%s'", name);
    return 0;
}

/* jct.dat: per policy a block "hours cdf", blocks separated by two blank lines. */
static int write_jct(const char *dir, struct sim_result *const *r, int n, struct mu_err *err)
{
    FILE *f = open_in(dir, "jct.dat", err);
    if (!f)
        return -1;
    for (int i = 0; i < n; i++) {
        const double *v;
        int k = sim_result_jcts(r[i], &v);
        (void)fprintf(f, "# %s\n", sim_policy_name(sim_result_policy(r[i])));
        for (int j = 0; j < k; j++)
            (void)fprintf(f, "%.6g %.6g\n", v[j] / 3600.0, (double)(j + 1) / k);
        (void)fprintf(f, "\n\n");
    }
    return close_checked(f, "jct.dat", err);
}

/* timeline.dat: per policy a block "hours pending running used_gpus". */
static int write_timeline(const char *dir, struct sim_result *const *r, int n, struct mu_err *err)
{
    FILE *f = open_in(dir, "timeline.dat", err);
    if (!f)
        return -1;
    for (int i = 0; i < n; i++) {
        const struct sim_sample *s;
        int k = sim_result_samples(r[i], &s);
        (void)fprintf(f, "# %s\n", sim_policy_name(sim_result_policy(r[i])));
        for (int j = 0; j < k; j++)
            (void)fprintf(f, "%.6g %d %d %.0f\n", s[j].t_s / 3600.0, s[j].pending, s[j].running,
                          s[j].used_gpus);
        (void)fprintf(f, "\n\n");
    }
    return close_checked(f, "timeline.dat", err);
}

static void plot_lines(
    FILE *f, struct sim_result *const *r, int n, const char *file, const char *using)
{
    (void)fprintf(f, "plot ");
    for (int i = 0; i < n; i++)
        (void)fprintf(f, "%s'%s' index %d using %s with lines lw 2 title '%s'",
                      i ? ", \\\n     " : "", file, i, using,
                      sim_policy_name(sim_result_policy(r[i])));
    (void)fprintf(f, "\n");
}

static int write_script(const char *dir, struct sim_result *const *r, int n, struct mu_err *err)
{
    FILE *f = open_in(dir, "plots.gp", err);
    if (!f)
        return -1;
    (void)fprintf(f, "# muster-sim plots: run 'gnuplot plots.gp' in this directory\n"
                     "set terminal svg size 900,540 noenhanced dynamic\nset key bottom right\n"
                     "set grid\n");
    (void)fprintf(f, "set output 'jct_cdf.svg'\nset title 'Job completion time (CDF)'\n"
                     "set logscale x\nset xlabel 'hours from submission to end'\n"
                     "set ylabel 'fraction of jobs'\n");
    plot_lines(f, r, n, "jct.dat", "1:2");
    (void)fprintf(f, "unset logscale x\nset key top right\nset xlabel 'hours'\n"
                     "set output 'utilisation.svg'\nset title 'GPUs in use'\n"
                     "set ylabel 'GPUs'\n");
    plot_lines(f, r, n, "timeline.dat", "1:4");
    (void)fprintf(f, "set output 'queue.svg'\nset title 'Pending jobs'\nset ylabel 'jobs'\n");
    plot_lines(f, r, n, "timeline.dat", "1:2");
    return close_checked(f, "plots.gp", err);
}

/* Runs "gnuplot plots.gp" in dir; 1 drawn, 0 no gnuplot, -1 with err. */
static int run_gnuplot(const char *dir, struct mu_err *err)
{
    char cd[4200];
    char *argv[] = { (char *)"gnuplot", (char *)"-e", cd, (char *)"plots.gp", NULL };
    pid_t pid;
    int status = 0;
    int rc;

    /* gnuplot runs its -e commands first, so the script and its outputs are found in dir */
    if (strchr(dir, '\'') || mu_snprintf(cd, sizeof(cd), "cd '%s'", dir) != 0)
        return mu_errf(err, MU_E_INVAL, "plot directory '%s': no quote allowed", dir);
    rc = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
    if (rc == ENOENT)
        return 0;
    if (rc != 0)
        return mu_errf(err, MU_E_SYS, "cannot start gnuplot: %s", strerror(rc));
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return mu_errf(err, MU_E_SYS, "gnuplot failed on '%s/plots.gp'", dir);
    return 1;
}

int sim_plot(const char *dir,
             struct sim_result *const *r,
             int n,
             char *note,
             size_t note_size,
             struct mu_err *err)
{
    int rc;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return mu_errf(err, MU_E_IO, "cannot create '%s': %s", dir, strerror(errno));
    if (write_jct(dir, r, n, err) != 0 || write_timeline(dir, r, n, err) != 0
        || write_script(dir, r, n, err) != 0)
        return -1;
    rc = run_gnuplot(dir, err);
    if (rc < 0)
        return -1;
    if (rc == 0)
        (void)mu_snprintf(note, note_size,
                          "gnuplot not found: wrote the data and %s/plots.gp but no images\n"
                          "hint: apt-get install gnuplot-nox, then: cd %s && gnuplot plots.gp",
                          dir, dir);
    else
        (void)mu_snprintf(note, note_size,
                          "plots: %s/jct_cdf.svg, %s/utilisation.svg, %s/queue.svg", dir, dir, dir);
    return 0;
}
