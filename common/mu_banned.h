/* SPDX-License-Identifier: MIT */
/*
 * Functions muster never calls: they overflow, cannot report errors, or run a shell.
 * Include this LAST in every .c file (after the system headers, which declare them), as git does
 * with banned.h; force-including it with -include lets a banned call slip through (docs/style.md
 * §1.7).
 */
#ifndef MUSTER_COMMON_MU_BANNED_H
#define MUSTER_COMMON_MU_BANNED_H

#define MU_BANNED(func) sorry_##func##_is_a_banned_function

#undef strcpy
#define strcpy(x, y) MU_BANNED(strcpy)
#undef strcat
#define strcat(x, y) MU_BANNED(strcat)
#undef sprintf
#define sprintf(...) MU_BANNED(sprintf)
#undef vsprintf
#define vsprintf(...) MU_BANNED(vsprintf)
#undef strtok
#define strtok(x, y) MU_BANNED(strtok)
#undef gets
#define gets(x) MU_BANNED(gets)
#undef atoi
#define atoi(x) MU_BANNED(atoi)
#undef atol
#define atol(x) MU_BANNED(atol)
#undef system
#define system(x) MU_BANNED(system)

#endif
