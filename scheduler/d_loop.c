/* placeholder: replaced by the module's real code */
typedef int muster_placeholder_d_loop;
